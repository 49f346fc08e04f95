#include "agent/triggers/mlflow.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "agent/repo/mirror.h"  // Mirror::PathFor
#include "agent/results/analysis.h"
#include "agent/triggers/forge_status.h"  // CommitPageUrl
#include "agent/triggers/run_cursor.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"
#include "queue/sweeps.h"
#include "stats/verdict.h"

namespace trainq {

namespace {

using nlohmann::json;

constexpr const char* kCursorMark = "mlflow:cursor";
// MLflow's documented limits of one runs/log-batch call.
constexpr size_t kMaxMetrics = 1000, kMaxParams = 100, kMaxTags = 100;
constexpr size_t kMaxParamValue = 6000, kMaxTagValue = 5000;

json Tag(const std::string& key, const std::string& value) {
  return {{"key", key}, {"value", value.substr(0, kMaxTagValue)}};
}

std::string UidOfBatch(std::int64_t id) { return "trainq:batch:" + std::to_string(id); }
std::string UidOfRun(std::int64_t id) { return "trainq:run:" + std::to_string(id); }

std::string StatusOf(RunState s) {
  switch (s) {
    case RunState::kSucceeded: return "FINISHED";
    case RunState::kCancelled: return "KILLED";
    case RunState::kFailed:
    case RunState::kDead: return "FAILED";
    default: return "RUNNING";
  }
}

// The top-level scalars of the experiment's resolved definition, as params.
void SpecParams(const std::string& spec_json, json& params) {
  json spec = json::parse(spec_json, nullptr, false);
  if (!spec.is_object()) return;
  for (const auto& [k, v] : spec.items()) {
    std::string value;
    if (v.is_string()) {
      value = v.get<std::string>();
    } else if (v.is_number() || v.is_boolean()) {
      value = v.dump();
    } else {
      continue;
    }
    params.push_back({{"key", MlflowKey("spec." + k)}, {"value", value.substr(0, kMaxParamValue)}});
  }
}

}  // namespace

std::string MlflowKey(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 250)) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                    c == '.' || c == '/' || c == ' ';
    out += ok ? c : '_';
  }
  return out.empty() ? "_" : out;
}

MlflowExporter::MlflowExporter(Store& store, const ServerConfig& config, HttpClient& http,
                               const Clock& clock, MlflowOptions options)
    : store_(store), config_(config), http_(http), clock_(clock), options_(options) {}

const MlflowConfig& MlflowExporter::TargetFor(const std::string& repo_url) const {
  const RepoConfig* repo = config_.FindRepo(repo_url);
  if (!repo && !options_.data_dir.empty()) {
    for (const auto& r : config_.repositories) {
      if (Mirror::PathFor(options_.data_dir, r.url) == repo_url) repo = &r;
    }
  }
  return config_.MlflowFor(repo);
}

Result<int> MlflowExporter::Enqueue(const BatchProgress& b) {
  // A batch that reuses another's runs has none of its own to export; its
  // runs are in that batch's export.
  if (b.active() || b.reuses_batch_id) return 0;
  if (!TargetFor(b.repo_url).enabled()) return 0;  // `mlflow: off` for its repository
  ASSIGN_OR_RETURN(bool w, store_.outbox().Enqueue(std::string(kMlflowTarget),
                                                   "batch:" + std::to_string(b.id), "batch",
                                                   UidOfBatch(b.id),
                                                   json{{"batch_id", b.id}}.dump(), clock_.Now()));
  if (w) spdlog::info("mlflow: batch {} ({} {}) queued for export", b.id, ShortSha(b.sha), b.experiment);
  return w ? 1 : 0;
}

Result<int> MlflowExporter::Scan() {
  if (!config_.MlflowAny()) return 0;
  const TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(auto cursor, ReadRunCursor(store_.outbox(), kCursorMark, now));
  ASSIGN_OR_RETURN(auto runs, store_.runs().RunsFinishedAfter(cursor.after_ms, cursor.after_id, 500));
  if (runs.empty()) return 0;
  int written = 0;
  std::set<std::int64_t> seen;
  for (const auto& r : runs) {
    if (!seen.insert(r.batch_id).second) continue;
    ASSIGN_OR_RETURN(auto b, store_.runs().Batch(r.batch_id));
    if (!b) continue;
    ASSIGN_OR_RETURN(int w, Enqueue(*b));
    written += w;
  }
  TRY(WriteRunCursor(store_.outbox(), kCursorMark, cursor, runs.back(), now));
  return written;
}

Result<int> MlflowExporter::EnqueueSince(TimeMs since_ms) {
  ASSIGN_OR_RETURN(auto batches, store_.runs().BatchesSince(since_ms));
  int written = 0;
  // Oldest first, so MLflow's runs come in the order they ran.
  for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
    ASSIGN_OR_RETURN(int w, Enqueue(*it));
    written += w;
  }
  return written;
}

Result<json> MlflowExporter::Call(const std::string& method, const std::string& endpoint,
                                  const json& body) {
  HttpRequest req;
  req.method = method;
  const MlflowConfig& target = target_ ? *target_ : config_.mlflow;
  req.url = target.tracking_uri + "/api/2.0/mlflow/" + endpoint;
  if (method == "GET") {
    std::string q;
    for (const auto& [k, v] : body.items()) {
      q += (q.empty() ? "?" : "&") + UrlEncode(k) + "=" +
           UrlEncode(v.is_string() ? v.get<std::string>() : v.dump());
    }
    req.url += q;
  } else {
    req.body = body.dump();
  }
  req.headers = {{"Content-Type", "application/json"}, {"User-Agent", "trainq-mlflow"}};
  if (!target.token.empty()) {
    req.headers.push_back({"Authorization", "Bearer " + target.token.value});
  }
  req.timeout_ms = options_.timeout_ms;
  auto resp = http_.Send(req);
  if (!resp) {
    return Fail(ErrorKind::kUnavailable, "MLflow " + endpoint + ": " + resp.error().message);
  }
  json j = json::parse(resp->body, nullptr, false);
  if (resp->ok()) {
    if (j.is_discarded()) return Fail(ErrorKind::kUnavailable, "MLflow " + endpoint + ": not JSON");
    return j;
  }
  std::string code, message;
  if (j.is_object()) {
    if (j.contains("error_code") && j["error_code"].is_string()) code = j["error_code"];
    if (j.contains("message") && j["message"].is_string()) message = j["message"];
  } else {
    message = resp->body.substr(0, 200);
    for (char& c : message) {
      if (c == '\n' || c == '\r') c = ' ';
    }
  }
  std::string text = "HTTP " + std::to_string(resp->status) + " from MLflow " + endpoint +
                     (code.empty() ? "" : ": " + code) + (message.empty() ? "" : ": " + message);
  // The token is never repeated back; scrub it all the same.
  if (!target.token.empty()) {
    for (size_t at; (at = text.find(target.token.value)) != std::string::npos;) {
      text.replace(at, target.token.value.size(), "<token>");
    }
  }
  ErrorKind kind = ErrorKind::kInvalidArgument;
  if (resp->status == 429 || resp->status >= 500 || resp->status == 408) kind = ErrorKind::kUnavailable;
  // A 429 (or a 503) may say when to come back (Retry-After in seconds, RFC
  // 9110 10.2.3): the row waits at least that long, at most an hour.
  if (resp->status == 429 || resp->status == 503) {
    if (auto ra = resp->Header("Retry-After")) {
      char* end = nullptr;
      long s = std::strtol(ra->c_str(), &end, 10);
      if (end != ra->c_str() && s >= 0) {
        retry_after_ms_ = std::min<long>(s, 3600) * 1000L;
        text += " (Retry-After: " + std::to_string(s) + " s)";
      }
    }
  }
  else if (code == "RESOURCE_DOES_NOT_EXIST") kind = ErrorKind::kNotFound;
  else if (code == "RESOURCE_ALREADY_EXISTS") kind = ErrorKind::kConflict;
  return Fail(kind, text);
}

Result<std::string> MlflowExporter::ExperimentId(const std::string& name) {
  const std::string cache_key = (target_ ? target_->tracking_uri : config_.mlflow.tracking_uri) + "\n" + name;
  if (auto it = experiment_ids_.find(cache_key); it != experiment_ids_.end()) return it->second;
  auto get = [&]() -> Result<std::string> {
    ASSIGN_OR_RETURN(json j, Call("GET", "experiments/get-by-name", {{"experiment_name", name}}));
    if (!j.contains("experiment") || !j["experiment"].contains("experiment_id")) {
      return Fail(ErrorKind::kUnavailable, "MLflow experiments/get-by-name: no experiment_id");
    }
    return j["experiment"]["experiment_id"].get<std::string>();
  };
  auto id = get();
  if (!id && id.error().kind == ErrorKind::kNotFound) {
    auto created = Call("POST", "experiments/create", {{"name", name}});
    if (created && created->contains("experiment_id")) {
      id = (*created)["experiment_id"].get<std::string>();
      spdlog::info("mlflow: created experiment {} ({})", name, *id);
    } else if (!created && created.error().kind == ErrorKind::kConflict) {
      id = get();  // made by someone else meanwhile
    } else if (!created) {
      return std::unexpected(created.error());
    } else {
      return Fail(ErrorKind::kUnavailable, "MLflow experiments/create: no experiment_id");
    }
  }
  if (!id) return std::unexpected(id.error());
  experiment_ids_[cache_key] = *id;
  return *id;
}

Result<std::pair<std::string, bool>> MlflowExporter::FindOrCreateRun(
    const std::string& experiment_id, const std::string& uid, const std::string& run_name,
    TimeMs start_ms, const json& tags) {
  ASSIGN_OR_RETURN(json found,
                   Call("POST", "runs/search",
                        {{"experiment_ids", json::array({experiment_id})},
                         {"filter", "tags.`trainq.uid` = '" + uid + "'"},
                         {"run_view_type", "ACTIVE_ONLY"},
                         {"max_results", 10}}));
  if (found.contains("runs") && found["runs"].is_array() && !found["runs"].empty()) {
    const json& run = found["runs"][0];
    bool whole = false;
    if (run.contains("data") && run["data"].contains("tags")) {
      for (const auto& t : run["data"]["tags"]) {
        if (t.value("key", "") == "trainq.exported") whole = true;
      }
    }
    return std::pair{run["info"]["run_id"].get<std::string>(), whole};
  }
  json all_tags = tags;
  all_tags.push_back(Tag("trainq.uid", uid));
  ASSIGN_OR_RETURN(json created, Call("POST", "runs/create",
                                      {{"experiment_id", experiment_id},
                                       {"run_name", run_name},
                                       {"start_time", start_ms},
                                       {"tags", all_tags}}));
  return std::pair{created["run"]["info"]["run_id"].get<std::string>(), false};
}

Status MlflowExporter::WriteRun(const std::string& run_id, const json& params, const json& tags,
                                const json& metrics, const std::string& status, TimeMs end_ms) {
  for (size_t p = 0, t = 0; p < params.size() || t < tags.size();) {
    json body = {{"run_id", run_id}, {"params", json::array()}, {"tags", json::array()}};
    for (size_t n = 0; n < kMaxParams && p < params.size(); ++n) body["params"].push_back(params[p++]);
    for (size_t n = 0; n < kMaxTags && t < tags.size(); ++n) body["tags"].push_back(tags[t++]);
    TRY(Call("POST", "runs/log-batch", body));
  }
  for (size_t m = 0; m < metrics.size();) {
    json body = {{"run_id", run_id}, {"metrics", json::array()}};
    for (size_t n = 0; n < kMaxMetrics && m < metrics.size(); ++n) body["metrics"].push_back(metrics[m++]);
    TRY(Call("POST", "runs/log-batch", body));
  }
  TRY(Call("POST", "runs/update", {{"run_id", run_id}, {"status", status}, {"end_time", end_ms}}));
  TRY(Call("POST", "runs/log-batch",
           {{"run_id", run_id}, {"tags", json::array({Tag("trainq.exported", "1")})}}));
  return {};
}

Status MlflowExporter::ExportChildren(const std::string& exp_id, const std::string& parent_id,
                                      const BatchProgress& b, const std::vector<RunRow>& runs,
                                      const json& git_tags, const std::string& name_prefix,
                                      const json& extra_params) {
  const std::string metric = MlflowKey(b.metric_name);
  auto metric_at = [&](json& into, const std::string& key, double v, TimeMs ts, std::int64_t step) {
    if (std::isfinite(v)) into.push_back({{"key", key}, {"value", v}, {"timestamp", ts}, {"step", step}});
  };
  for (const auto& r : runs) {
    json ctags = git_tags;
    ctags.push_back(Tag("mlflow.parentRunId", parent_id));
    ctags.push_back(Tag("trainq.run_id", std::to_string(r.id)));
    ctags.push_back(Tag("trainq.state", std::string(RunStateName(r.state))));
    if (!r.last_error.empty()) ctags.push_back(Tag("trainq.error", r.last_error));
    const TimeMs start = r.started_ms.value_or(b.created_ms);
    const TimeMs end = r.finished_ms.value_or(start);
    ASSIGN_OR_RETURN(auto child,
                     FindOrCreateRun(exp_id, UidOfRun(r.id), name_prefix + "seed " + std::to_string(r.seed),
                                     start, json::array({Tag("mlflow.parentRunId", parent_id)})));
    if (child.second) continue;
    json cparams = json::array({json{{"key", "seed"}, {"value", std::to_string(r.seed)}},
                                json{{"key", "repeat"}, {"value", std::to_string(r.repeat)}},
                                json{{"key", "attempts"}, {"value", std::to_string(r.attempts)}}});
    for (const auto& p : extra_params) cparams.push_back(p);
    SpecParams(b.spec_json, cparams);
    // The curve: each point at its step (its index when it has none), all
    // stamped with the run's end, so logging them again is no new point.
    json cmetrics = json::array();
    ASSIGN_OR_RETURN(auto points, store_.runs().Metrics(r.id));
    std::map<std::string, std::int64_t> next_step;
    bool final_logged = false;
    for (const auto& p : points) {
      const std::string key = MlflowKey(p.name);
      std::int64_t& n = next_step[key];
      const std::int64_t step = p.step.value_or(n);
      n = step + 1;
      metric_at(cmetrics, key, p.value, end, step);
      if (p.final && key == metric) final_logged = true;
    }
    if (r.metric_value && !final_logged) metric_at(cmetrics, metric, *r.metric_value, end, next_step[metric]);
    TRY(WriteRun(child.first, cparams, ctags, cmetrics, StatusOf(r.state), end));
  }
  return {};
}

// A sweep is one MLflow parent (uid trainq:sweep:<id>) in its experiment's
// MLflow experiment, with a child per point and seed: each point's batch
// adds its seeds under it, named "point <i> seed <s>", with the point's
// parameters as params `param.<name>`; the parent gets the point's mean as
// metric `<metric>.point_mean` at step <i>.
Status MlflowExporter::ExportSweepPoint(const BatchProgress& b, const json& sweep) {
  const std::int64_t sweep_id = sweep["id"].get<std::int64_t>();
  const std::int64_t idx = sweep["point"].get<std::int64_t>();
  ASSIGN_OR_RETURN(auto row, store_.sweeps().GetSweep(sweep_id));
  const std::string experiment =
      row ? row->experiment : b.experiment.substr(0, b.experiment.rfind("@sweep"));
  ASSIGN_OR_RETURN(std::string exp_id, ExperimentId(target_->experiment_prefix + experiment));
  ASSIGN_OR_RETURN(auto runs, store_.runs().Runs(b.id, std::nullopt, 100'000));
  const std::string metric = MlflowKey(b.metric_name);
  json git_tags = json::array({Tag("mlflow.source.git.commit", b.sha),
                               Tag("mlflow.source.type", "JOB"),
                               Tag("mlflow.source.name", b.repo_url),
                               Tag("mlflow.source.git.repoURL", b.repo_url),
                               Tag("trainq.experiment", experiment),
                               Tag("trainq.sweep_id", std::to_string(sweep_id))});
  TimeMs end_ms = b.created_ms;
  for (const auto& r : runs) end_ms = std::max(end_ms, r.finished_ms.value_or(0));
  const TimeMs start_ms = row ? row->created_ms : b.created_ms;
  ASSIGN_OR_RETURN(auto parent,
                   FindOrCreateRun(exp_id, "trainq:sweep:" + std::to_string(sweep_id),
                                   "sweep " + std::to_string(sweep_id) + " " + experiment,
                                   start_ms, git_tags));
  // The point's children first (each marked whole on its own), then the
  // parent again: it is shared by every point, so never skipped.
  json point_params = json::array({json{{"key", "point"}, {"value", std::to_string(idx)}},
                                   json{{"key", "trainq.batch_id"}, {"value", std::to_string(b.id)}}});
  if (sweep.contains("params") && sweep["params"].is_object()) {
    for (const auto& [k, v] : sweep["params"].items()) {
      point_params.push_back({{"key", MlflowKey("param." + k)},
                              {"value", (v.is_string() ? v.get<std::string>() : v.dump()).substr(0, kMaxParamValue)}});
    }
  }
  TRY(ExportChildren(exp_id, parent.first, b, runs, git_tags,
                     "point " + std::to_string(idx) + " ", point_params));
  json ptags = git_tags;
  std::string note = "trainq sweep " + std::to_string(sweep_id) + ": " + experiment + " at " +
                     ShortSha(b.sha) + " (" + b.subject + "), a child run per point and seed\n";
  if (!config_.public_url.empty()) {
    std::string base = config_.public_url;
    while (base.ends_with("/")) base.pop_back();
    note += "\n[Open in trainq](" + base + "/sweeps?sweep=" + std::to_string(sweep_id) + ")\n";
  }
  ptags.push_back(Tag("mlflow.note.content", note));
  json pmetrics = json::array();
  if (!b.values.empty()) {
    double sum = 0;
    for (double v : b.values) sum += v;
    const double mean = sum / static_cast<double>(b.values.size());
    if (std::isfinite(mean)) {
      pmetrics.push_back({{"key", metric + ".point_mean"}, {"value", mean}, {"timestamp", end_ms}, {"step", idx}});
    }
  }
  json pparams = json::array({json{{"key", "experiment"}, {"value", experiment}},
                              json{{"key", "metric"}, {"value", b.metric_name}},
                              json{{"key", "goal"}, {"value", b.metric_goal}},
                              json{{"key", "sweep_id"}, {"value", std::to_string(sweep_id)}}});
  const bool over = row && row->state != "running";
  return WriteRun(parent.first, pparams, ptags, pmetrics, over ? "FINISHED" : "RUNNING", end_ms);
}

Status MlflowExporter::ExportBatch(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto batch, store_.runs().Batch(batch_id));
  if (!batch) return Fail(ErrorKind::kNotFound, "no batch " + std::to_string(batch_id));
  const BatchProgress& b = *batch;
  target_ = &TargetFor(b.repo_url);
  if (!target_->enabled()) {
    return Fail(ErrorKind::kInvalidArgument, "MLflow export is off for " + b.repo_url);
  }
  {
    json spec = json::parse(b.spec_json.empty() ? "{}" : b.spec_json, nullptr, false);
    if (spec.is_object() && spec.contains("sweep") && spec["sweep"].is_object() &&
        spec["sweep"].contains("id") && spec["sweep"]["id"].is_number_integer() &&
        spec["sweep"].contains("point") && spec["sweep"]["point"].is_number_integer()) {
      return ExportSweepPoint(b, spec["sweep"]);
    }
  }
  ASSIGN_OR_RETURN(std::string exp_id, ExperimentId(target_->experiment_prefix + b.experiment));
  ASSIGN_OR_RETURN(auto cmp, CompareInFamily(store_, b, /*compare_running=*/false));
  ASSIGN_OR_RETURN(auto runs, store_.runs().Runs(b.id, std::nullopt, 100'000));

  const std::string link = CommitPageUrl(config_, b.sha);
  const std::string metric = MlflowKey(b.metric_name);
  json git_tags = json::array({Tag("mlflow.source.git.commit", b.sha),
                               Tag("mlflow.source.type", "JOB"),
                               Tag("mlflow.source.name", b.repo_url),
                               Tag("mlflow.source.git.repoURL", b.repo_url),
                               Tag("trainq.experiment", b.experiment),
                               Tag("trainq.batch_id", std::to_string(b.id))});
  TimeMs end_ms = b.created_ms;
  for (const auto& r : runs) end_ms = std::max(end_ms, r.finished_ms.value_or(0));

  // The parent: the batch and its verdict.
  json ptags = git_tags;
  std::string note = "trainq batch " + std::to_string(b.id) + ": " + b.experiment + " at " +
                     ShortSha(b.sha) + " (" + b.subject + ")\n\n";
  json pmetrics = json::array();
  auto metric_at = [&](json& into, const std::string& key, double v, TimeMs ts, std::int64_t step) {
    if (std::isfinite(v)) into.push_back({{"key", key}, {"value", v}, {"timestamp", ts}, {"step", step}});
  };
  if (cmp) {
    const BatchComparison& c = *cmp;
    ptags.push_back(Tag("trainq.verdict", VerdictWord(c)));
    ptags.push_back(Tag("trainq.baseline.sha", c.b.sha));
    ptags.push_back(Tag("trainq.baseline.batch_id", std::to_string(c.b.id)));
    ptags.push_back(Tag("trainq.comparison", ComparisonText(c)));
    if (!CorrectionText(c).empty()) ptags.push_back(Tag("trainq.correction", CorrectionText(c)));
    if (c.cmp) metric_at(pmetrics, "trainq.effect", c.cmp->diff, end_ms, 0);
    if (c.interval) {
      metric_at(pmetrics, "trainq.interval.lo", c.interval->lo, end_ms, 0);
      metric_at(pmetrics, "trainq.interval.hi", c.interval->hi, end_ms, 0);
      metric_at(pmetrics, "trainq.interval.level", c.interval_level, end_ms, 0);
    }
    if (c.p_raw) metric_at(pmetrics, "trainq.p_raw", *c.p_raw, end_ms, 0);
    if (c.p_adjusted) metric_at(pmetrics, "trainq.p_adjusted", *c.p_adjusted, end_ms, 0);
    note += "Verdict: " + VerdictWord(c) + " against " + ShortSha(c.b.sha) + "\n" +
            ComparisonText(c) + "\n";
  } else {
    ptags.push_back(Tag("trainq.verdict", "none"));
    note += "No comparison (no baseline batch, or no finished run on a side).\n";
  }
  if (!link.empty()) note += "\n[Open in trainq](" + link + ")\n";
  ptags.push_back(Tag("mlflow.note.content", note));
  if (!b.values.empty()) {
    double sum = 0;
    for (double v : b.values) sum += v;
    metric_at(pmetrics, metric + ".mean", sum / b.values.size(), end_ms, 0);
  }
  metric_at(pmetrics, "trainq.runs.succeeded",
            static_cast<double>(b.count(RunState::kSucceeded)), end_ms, 0);
  json pparams = json::array({json{{"key", "experiment"}, {"value", b.experiment}},
                              json{{"key", "metric"}, {"value", b.metric_name}},
                              json{{"key", "goal"}, {"value", b.metric_goal}},
                              json{{"key", "repeats"}, {"value", std::to_string(b.repeats)}}});
  SpecParams(b.spec_json, pparams);
  ASSIGN_OR_RETURN(auto parent,
                   FindOrCreateRun(exp_id, UidOfBatch(b.id), ShortSha(b.sha) + " " + b.experiment,
                                   b.created_ms, git_tags));
  if (parent.second) return {};  // written whole before

  // A child per seed.
  TRY(ExportChildren(exp_id, parent.first, b, runs, git_tags, "", json::array()));
  return WriteRun(parent.first, pparams, ptags, pmetrics, "FINISHED", end_ms);
}

Result<int> MlflowExporter::Send(int limit) {
  if (!config_.MlflowAny()) return 0;
  ASSIGN_OR_RETURN(auto due, store_.outbox().Due(std::string(kMlflowTarget), clock_.Now(), limit));
  int tried = 0;
  std::set<std::string> failing;  // tracking servers that failed this pass
  for (const auto& row : due) {
    json p = json::parse(row.payload, nullptr, false);
    TimeMs now = clock_.Now();
    if (!p.is_object() || !p.contains("batch_id") || !p["batch_id"].is_number_integer()) {
      TRY(store_.outbox().MarkFailed(row.id, "unreadable payload", now, true, now));
      continue;
    }
    const std::int64_t batch_id = p["batch_id"];
    // A server that failed this pass is not asked again; another
    // repository's server may well answer.
    ASSIGN_OR_RETURN(auto pb, store_.runs().Batch(batch_id));
    if (pb && failing.contains(TargetFor(pb->repo_url).tracking_uri)) continue;
    ++tried;
    retry_after_ms_.reset();
    target_ = nullptr;
    auto st = ExportBatch(batch_id);
    now = clock_.Now();
    if (st) {
      TRY(store_.outbox().MarkDelivered(row.id, now));
      spdlog::info("mlflow: batch {} exported", batch_id);
      continue;
    }
    const int attempt = row.attempts + 1;
    const bool give_up = !st.error().retryable() || attempt >= options_.max_attempts;
    TimeMs delay = options_.retry_base_ms;
    for (int i = 1; i < attempt && delay < options_.retry_max_ms; ++i) delay *= 2;
    delay = std::min(delay, options_.retry_max_ms);
    if (retry_after_ms_) delay = std::max(delay, *retry_after_ms_);
    if (give_up) {
      spdlog::warn("mlflow: giving up on batch {} after {} attempt(s): {}", batch_id, attempt,
                   st.error().message);
    } else {
      spdlog::warn("mlflow: batch {} not exported (attempt {}/{}, next in {}): {}", batch_id,
                   attempt, options_.max_attempts, FormatDuration(delay), st.error().message);
    }
    TRY(store_.outbox().MarkFailed(row.id, st.error().message, now + delay, give_up, now));
    // The server is down or refusing: its other rows wait for the next pass.
    if (st.error().retryable() && target_) failing.insert(target_->tracking_uri);
  }
  return tried;
}

}  // namespace trainq

namespace trainq {

Result<nlohmann::json> MlflowStatusJson(Store& store, const ServerConfig& config) {
  using nlohmann::json;
  auto opt = [](const std::optional<TimeMs>& v) { return v ? json(*v) : json(); };
  json servers = json::array();
  if (config.mlflow.enabled()) {
    servers.push_back({{"scope", "every repository"},
                       {"to", UrlForLog(config.mlflow.tracking_uri)},
                       {"experiment_prefix", config.mlflow.experiment_prefix}});
  }
  for (const auto& r : config.repositories) {
    if (!r.mlflow) continue;
    servers.push_back({{"scope", UrlForLog(r.url)},
                       {"to", r.mlflow->enabled() ? UrlForLog(r.mlflow->tracking_uri) : "off"},
                       {"experiment_prefix", r.mlflow->experiment_prefix}});
  }
  json out = {{"configured", config.MlflowAny()},
              {"servers", servers},
              {"exported", 0},
              {"pending", 0},
              {"gave_up", 0},
              {"last_export_ms", nullptr},
              {"last_exported_batch", nullptr},
              {"last_error_ms", nullptr},
              {"last_error", ""}};
  ASSIGN_OR_RETURN(auto sums, store.outbox().Summaries(std::string(kMlflowTarget)));
  for (const auto& s : sums) {
    if (s.target != kMlflowTarget) continue;
    out["exported"] = s.delivered;
    out["pending"] = s.pending;
    out["gave_up"] = s.gave_up;
    out["last_export_ms"] = opt(s.last_delivered_ms);
    out["last_error_ms"] = opt(s.last_error_ms);
    out["last_error"] = s.last_error;
  }
  // Which batch went last: the newest delivered of the recent rows.
  ASSIGN_OR_RETURN(auto recent, store.outbox().Recent(std::string(kMlflowTarget), 50));
  {
    std::optional<TimeMs> best;
    for (const auto& row : recent) {
      if (!row.delivered_ms || (best && *row.delivered_ms <= *best)) continue;
      best = row.delivered_ms;
      json p = json::parse(row.payload, nullptr, false);
      if (p.is_object() && p.contains("batch_id")) out["last_exported_batch"] = p["batch_id"];
    }
  }
  return out;
}

}  // namespace trainq
