#include "agent/runner/protocol.h"

#include <algorithm>
#include <cmath>

namespace trainq {

using nlohmann::json;

namespace {

// j[key] as T, or `fallback` when it is missing or of another type (answers).
template <typename T>
T Get(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

template <typename T>
std::optional<T> GetOptional(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// j[key] when it is an integer (not 1.5, not "1"): ids, tokens and ranks.
template <typename T>
std::optional<T> GetInteger(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<T>();
}

}  // namespace

std::string AnswerError(const json& body) { return Get<std::string>(body, "error", ""); }

// ---- envelope --------------------------------------------------------------------

Result<RunEnvelope> ParseRunEnvelope(const json& j, std::string_view call) {
  if (!j.is_object()) {
    return Fail(ErrorKind::kInvalidArgument, std::string(call) + ": the body is not a JSON object");
  }
  auto t = j.find("token");
  if (t == j.end() || !t->is_number_integer()) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string(call) + ": \"token\" (the lease's fencing token) is required");
  }
  RunEnvelope e;
  e.token = t->get<std::int64_t>();
  e.worker_id = GetInteger<std::int64_t>(j, "worker_id");
  return e;
}

json ToJson(const RunEnvelope& e) {
  json j = {{"token", e.token}};
  if (e.worker_id) j["worker_id"] = *e.worker_id;
  return j;
}

// ---- register --------------------------------------------------------------------

json ToJson(const RegisterRequest& r) {
  json gpus = json::array();
  for (const auto& g : r.gpus) {
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_mb", g.memory_mb}});
  }
  json j = {{"name", r.name},
            {"hostname", r.hostname},
            {"pid", r.pid},
            {"slots", r.slots},
            {"gpus", gpus},
            {"cpus", r.cpus},
            {"memory_mb", r.memory_mb},
            {"version", r.version},
            {"trainer", r.trainer},
            {"sandbox", r.sandbox},
            {"sandbox_note", r.sandbox_note}};
  if (r.runs_per_gpu) j["runs_per_gpu"] = *r.runs_per_gpu;
  return j;
}

Result<RegisterRequest> ParseRegisterRequest(const json& j) {
  if (!j.is_object()) {
    return Fail(ErrorKind::kInvalidArgument, "register: the body is not a JSON object");
  }
  RegisterRequest r;
  try {
    r.name = j.value("name", std::string());
    r.hostname = j.value("hostname", std::string());
    r.pid = j.value("pid", 0);
    r.slots = std::max(1, j.value("slots", 1));
    r.cpus = j.value("cpus", 0);
    r.memory_mb = j.value("memory_mb", std::int64_t{0});
    r.version = j.value("version", std::string());
    r.trainer = j.value("trainer", std::string());
    r.runs_per_gpu = GetOptional<int>(j, "runs_per_gpu");
  } catch (const json::exception& e) {
    return Fail(ErrorKind::kInvalidArgument, std::string("register: ") + e.what());
  }
  if (auto g = j.find("gpus"); g != j.end()) {
    if (g->is_array()) {
      for (const auto& one : *g) {
        GpuInfo info;
        info.index = Get<int>(one, "index", static_cast<int>(r.gpus.size()));
        info.name = Get<std::string>(one, "name", "");
        info.memory_mb = Get<std::int64_t>(one, "memory_mb", 0);
        r.gpus.push_back(std::move(info));
      }
    } else if (g->is_number_integer() && g->get<int>() >= 0 && g->get<int>() <= 1024) {
      for (int i = 0; i < g->get<int>(); ++i) r.gpus.push_back(GpuInfo{i, "", 0});
    } else {
      return Fail(ErrorKind::kInvalidArgument, "register: gpus must be a list of GPUs");
    }
  }
  // The sandbox form the worker's probe found, and why: shown to people, so short.
  r.sandbox = Get<std::string>(j, "sandbox", "").substr(0, 500);
  r.sandbox_note = Get<std::string>(j, "sandbox_note", "").substr(0, 500);
  if (r.name.empty() && r.hostname.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "register: a worker without a machine name must send its hostname");
  }
  return r;
}

json ResourcesJson(const RegisterRequest& r) {
  json j = ToJson(r);
  for (const char* k : {"name", "hostname", "slots"}) j.erase(k);
  for (const char* k : {"sandbox", "sandbox_note"}) {  // not sent by an older worker
    if (j[k].get_ref<const std::string&>().empty()) j.erase(k);
  }
  return j;
}

// ---- lease ---------------------------------------------------------------------

json ToJson(const LeaseRequest& r) {
  json j = {{"max_runs", r.max_runs},
            {"free_gpus", r.free_gpus},
            {"fuse_max", r.fuse_max},
            {"wait_ms", r.wait_ms}};
  if (r.runs_per_gpu) j["runs_per_gpu"] = *r.runs_per_gpu;
  return j;
}

LeaseRequest ParseLeaseRequest(const json& j) {
  LeaseRequest r;
  r.max_runs = j.value("max_runs", 1);
  r.free_gpus = j.value("free_gpus", 0.0);
  if (j.contains("runs_per_gpu")) r.runs_per_gpu = j.at("runs_per_gpu").get<int>();
  r.fuse_max = j.value("fuse_max", 1);
  r.wait_ms = j.value("wait_ms", TimeMs{0});
  return r;
}

json ToJson(const LeasedRun& r) {
  json j = {{"run_id", r.run_id},
            {"batch_id", r.batch_id},
            {"token", r.token},
            {"seed", r.seed},
            {"repeat", r.repeat},
            {"attempt", r.attempt},
            {"expires_ms", r.expires_ms},
            {"experiment", r.experiment},
            {"command", r.command},
            {"metric_name", r.metric_name},
            {"metric_regex", r.metric_regex},
            {"repo_url", r.repo_url},
            {"sha", r.sha},
            {"timeout_s", r.timeout_s},
            {"gpus", r.gpus},
            {"trainer", r.trainer},
            {"group", r.group},
            {"nodes", r.nodes},
            {"procs_per_node", r.procs_per_node},
            {"node_rank", r.node_rank}};
  if (r.env_passthrough) j["env_passthrough"] = *r.env_passthrough;
  return j;
}

Result<WorkerRun> ParseWorkerRun(const json& j) {
  if (!j.is_object())
    return Fail(ErrorKind::kInvalidArgument, "lease answer: a run is not an object");
  WorkerRun w;
  try {
    auto& l = w.lease;
    l.run_id = j.at("run_id").get<std::int64_t>();
    l.token = j.at("token").get<std::int64_t>();
    l.batch_id = Get<std::int64_t>(j, "batch_id", 0);
    l.seed = Get<std::int64_t>(j, "seed", 0);
    l.repeat = Get<int>(j, "repeat", 0);
    l.attempt = Get<int>(j, "attempt", 1);
    l.expires_ms = Get<TimeMs>(j, "expires_ms", 0);
    l.experiment = Get<std::string>(j, "experiment", "");
    l.command = j.at("command").get<std::string>();
    l.metric_name = Get<std::string>(j, "metric_name", "accuracy");
    l.metric_regex = Get<std::string>(j, "metric_regex", "");
    l.repo_url = j.at("repo_url").get<std::string>();
    l.sha = j.at("sha").get<std::string>();
    l.timeout_s = Get<std::int64_t>(j, "timeout_s", 0);
    l.gpus = Get<int>(j, "gpus", 0);
    w.trainer = Get<std::string>(j, "trainer", "");
    w.group = Get<std::int64_t>(j, "group", 0);
    l.trainer = w.trainer;
    l.group = w.group;
    l.nodes = Get<int>(j, "nodes", 0);
    l.procs_per_node = Get<int>(j, "procs_per_node", 0);
    l.node_rank = Get<int>(j, "node_rank", 0);
    if (j.contains("env_passthrough") && j["env_passthrough"].is_array()) {
      std::vector<std::string> names;
      for (const auto& n : j["env_passthrough"]) {
        if (n.is_string()) names.push_back(n.get<std::string>());
      }
      l.env_passthrough = std::move(names);
    }
  } catch (const json::exception& e) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string("lease answer: a run lacks a field: ") + e.what());
  }
  return w;
}

json ToJson(const LeaseAnswer& a) {
  json runs = json::array();
  for (const auto& r : a.runs) runs.push_back(ToJson(r));
  return {{"state", a.state}, {"runs", runs}};
}

LeaseAnswer ParseLeaseAnswer(const json& j, std::vector<WorkerRun>& runs,
                             std::vector<std::string>& bad) {
  LeaseAnswer a;
  a.state = Get<std::string>(j, "state", "ready");
  if (j.is_object() && j.contains("runs") && j["runs"].is_array()) {
    for (const auto& r : j["runs"]) {
      auto w = ParseWorkerRun(r);
      if (!w) {
        bad.push_back(w.error().message);
        continue;
      }
      a.runs.push_back(w->lease);
      runs.push_back(std::move(*w));
    }
  }
  return a;
}

// ---- heartbeat -------------------------------------------------------------------

json ToJson(const HeartbeatRequest& r) {
  json j = {{"token", r.token}};
  if (r.started) j["started"] = true;
  return j;
}

HeartbeatRequest ParseHeartbeatRequest(const json& j) {
  HeartbeatRequest r;
  r.token = j.value("token", std::int64_t{0});
  r.started = j.value("started", false);
  return r;
}

json ToJson(const HeartbeatAnswer& a) { return {{"expires_ms", a.expires_ms}}; }

// ---- metrics ---------------------------------------------------------------------

json PointJson(const MetricPoint& p) {
  json j = {{"name", p.name}, {"value", p.value}, {"final", p.final}};
  if (p.step) j["step"] = *p.step;
  return j;
}

json ToJson(const MetricsRequest& r) {
  json points = json::array();
  for (const auto& p : r.points) {
    if (std::isfinite(p.value)) points.push_back(PointJson(p));
  }
  json j = {{"token", r.token}, {"points", points}};
  if (r.worker_id) j["worker_id"] = *r.worker_id;
  return j;
}

Result<MetricsRequest> ParseMetricsRequest(const json& j) {
  MetricsRequest r;
  r.token = j.value("token", std::int64_t{0});
  r.worker_id = GetInteger<std::int64_t>(j, "worker_id");
  auto p = j.find("points");
  if (p == j.end()) return r;
  if (!p->is_array()) return Fail(ErrorKind::kInvalidArgument, "metrics: \"points\" must be a list");
  for (const auto& pt : *p) {
    if (!pt.is_object() || !pt.contains("name") || !pt.contains("value") ||
        !pt["value"].is_number()) {
      return Fail(ErrorKind::kInvalidArgument,
                  "metrics: each point needs a \"name\" and a numeric \"value\"");
    }
    MetricPoint mp;
    mp.name = pt["name"].get<std::string>();
    mp.value = pt["value"].get<double>();
    if (pt.contains("step") && pt["step"].is_number_integer()) {
      mp.step = pt["step"].get<std::int64_t>();
    }
    mp.final = pt.value("final", false);
    r.points.push_back(std::move(mp));
  }
  return r;
}

// ---- complete --------------------------------------------------------------------

json ToJson(const CompleteRequest& r) {
  json j = {{"token", r.token}, {"outcome", r.outcome}};
  if (r.worker_id) j["worker_id"] = *r.worker_id;
  if (r.metric_value) j["metric_value"] = *r.metric_value;
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.retry) j["retry"] = false;  // fails the same way every time
  return j;
}

Result<CompleteRequest> ParseCompleteRequest(const json& j) {
  CompleteRequest r;
  r.token = j.value("token", std::int64_t{0});
  r.outcome = j.value("outcome", std::string());
  r.error = j.value("error", std::string());
  if (j.contains("worker_id") && j["worker_id"].is_number_integer()) {
    r.worker_id = j["worker_id"].get<std::int64_t>();
  }
  if (j.contains("exit_code") && j["exit_code"].is_number_integer()) {
    r.exit_code = j["exit_code"].get<int>();
  }
  if (j.contains("metric_value") && j["metric_value"].is_number()) {
    r.metric_value = j["metric_value"].get<double>();
  }
  r.retry = !(j.contains("retry") && j["retry"].is_boolean() && !j["retry"].get<bool>());
  if (r.outcome == "succeeded") {
    if (!r.metric_value) {
      return Fail(ErrorKind::kInvalidArgument,
                  "complete: a succeeded run needs a numeric \"metric_value\"");
    }
  } else if (r.outcome != "failed" && r.outcome != "interrupted") {
    return Fail(ErrorKind::kInvalidArgument,
                "complete: outcome must be succeeded, failed or interrupted, got \"" + r.outcome +
                    "\"");
  }
  return r;
}

json ToJson(const CompleteAnswer& a) { return {{"state", a.state}}; }

// ---- gang ------------------------------------------------------------------------

namespace {

json MemberJson(const char* action, const GangMemberId& m) {
  return {{"action", action},
          {"token", m.token},
          {"node_rank", m.node_rank},
          {"worker_id", m.worker_id}};
}

}  // namespace

json ToJson(const GangBeat& r) {
  json j = MemberJson("beat", r.member);
  j["started"] = r.started;
  if (r.master_port > 0) {
    j["master_addr"] = r.master_addr;
    j["master_port"] = r.master_port;
  }
  return j;
}

json ToJson(const GangLog& r) {
  json j = MemberJson("log", r.member);
  j["rank"] = r.rank;
  j["text"] = r.text;
  return j;
}

json ToJson(const GangComplete& r) {
  json j = MemberJson("complete", r.member);
  j["outcome"] = r.outcome;
  if (r.metric_value) j["metric_value"] = *r.metric_value;
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (!r.error.empty()) {
    j["error"] = r.error.size() > GangComplete::kMaxError
                     ? r.error.substr(0, GangComplete::kMaxError) + "..."
                     : r.error;
  }
  if (!r.retry) j["retry"] = false;
  return j;
}

Result<GangRequest> ParseGangRequest(const json& j) {
  if (!j.is_object()) return Fail(ErrorKind::kInvalidArgument, "gang: the body is not a JSON object");
  auto token = GetInteger<std::int64_t>(j, "token");
  auto node_rank = GetInteger<int>(j, "node_rank");
  auto machine = GetInteger<std::int64_t>(j, "worker_id");
  if (!token || !node_rank || !machine || *node_rank < 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "gang: \"token\", \"node_rank\" and \"worker_id\" are required");
  }
  const GangMemberId member{*token, *node_rank, *machine};
  const std::string action = Get<std::string>(j, "action", "");
  if (action == "beat") {
    GangBeat b;
    b.member = member;
    b.started = Get<bool>(j, "started", false);
    b.master_addr = Get<std::string>(j, "master_addr", "");
    b.master_port = Get<int>(j, "master_port", 0);
    return b;
  }
  if (action == "log") {
    auto rank = GetInteger<int>(j, "rank");
    auto text = j.find("text");
    if (!rank || *rank < 0 || *rank > GangLog::kMaxRank || text == j.end() || !text->is_string()) {
      return Fail(ErrorKind::kInvalidArgument,
                  "gang: a log needs \"rank\" (0..99999) and \"text\"");
    }
    return GangLog{member, *rank, text->get<std::string>()};
  }
  if (action != "complete") {
    return Fail(ErrorKind::kInvalidArgument,
                "gang: action must be beat, log or complete, got \"" + action + "\"");
  }
  GangComplete c;
  c.member = member;
  c.outcome = Get<std::string>(j, "outcome", "");
  c.error = Get<std::string>(j, "error", "");
  c.exit_code = GetInteger<int>(j, "exit_code");
  if (auto m = j.find("metric_value"); m != j.end() && m->is_number()) {
    c.metric_value = m->get<double>();
  }
  c.retry = !(j.contains("retry") && j["retry"].is_boolean() && !j["retry"].get<bool>());
  if (c.outcome != "succeeded" && c.outcome != "failed" && c.outcome != "interrupted") {
    return Fail(ErrorKind::kInvalidArgument,
                "gang: outcome must be succeeded, failed or interrupted, got \"" + c.outcome +
                    "\"");
  }
  if (c.outcome == "succeeded" && member.node_rank == 0 && !c.metric_value) {
    return Fail(ErrorKind::kInvalidArgument,
                "gang: node 0's success needs a numeric \"metric_value\"");
  }
  return c;
}

json ToJson(const GangBeatAnswer& a) {
  return {{"master_addr", a.master_addr},
          {"master_port", a.master_port},
          {"expires_ms", a.expires_ms}};
}

GangBeatAnswer ParseGangBeatAnswer(const json& j) {
  GangBeatAnswer a;
  a.master_addr = Get<std::string>(j, "master_addr", "");
  a.master_port = Get<int>(j, "master_port", 0);
  a.expires_ms = Get<TimeMs>(j, "expires_ms", 0);
  return a;
}

// ---- register: the answer --------------------------------------------------------

json ToJson(const RegisterAnswer& a) {
  json j = {{"worker_id", a.worker_id}, {"name", a.name},         {"pool", a.pool},
            {"lease_ms", a.lease_ms},   {"heartbeat_ms", a.heartbeat_ms}};
  if (a.orphan_timeout_ms) j["orphan_timeout_ms"] = *a.orphan_timeout_ms;
  if (a.runs_per_gpu) j["runs_per_gpu"] = *a.runs_per_gpu;
  if (a.self_stop) j["self_stop"] = *a.self_stop;
  return j;
}

RegisterAnswer ParseRegisterAnswer(const json& j) {
  RegisterAnswer a;
  a.worker_id = Get<std::int64_t>(j, "worker_id", 0);
  a.name = Get<std::string>(j, "name", "");
  a.pool = Get<std::string>(j, "pool", "");
  a.lease_ms = Get<TimeMs>(j, "lease_ms", 0);
  a.heartbeat_ms = Get<TimeMs>(j, "heartbeat_ms", 10'000);
  a.orphan_timeout_ms = GetOptional<TimeMs>(j, "orphan_timeout_ms");
  a.runs_per_gpu = GetOptional<int>(j, "runs_per_gpu");
  a.self_stop = GetOptional<std::string>(j, "self_stop");
  return a;
}

}  // namespace trainq
