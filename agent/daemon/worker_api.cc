// The worker protocol on the server (agent/daemon/worker_api.h).
#include "agent/daemon/worker_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <variant>

#include "agent/daemon/server_context.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/mirror.h"
#include "agent/results/analysis.h"
#include "agent/runner/protocol.h"
#include "core/crypto.h"
#include "core/log.h"
#include "core/strings.h"
#include "queue/gangs.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {

namespace fs = std::filesystem;

namespace {

HttpServerReply Json(int status, const json& body) {
  return {status, "application/json", body.dump() + "\n"};
}

HttpServerReply ErrorReply(int status, const std::string& message) {
  return Json(status, {{"error", message}});
}

int StatusOf(const trainq::Error& e) {
  switch (e.kind) {
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kConflict:
      return 409;
    case ErrorKind::kInvalidArgument:
      return 400;
    default:
      return 503;
  }
}

std::optional<std::int64_t> ParseId(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

// Whether a live member of gang run `run_id` is on `machine` (a node > 0
// fetches the source of a run whose machine_id is node 0's).
bool GangMemberOn(Store& store, std::int64_t run_id, std::int64_t machine) {
  auto members = store.gangs().GangMembers(run_id);
  if (!members) return false;
  for (const auto& g : *members) {
    if (g.machine_id == machine) return true;
  }
  return false;
}

// The body as a JSON object; nullopt when it is not one.
std::optional<json> Body(const HttpServerRequest& req) {
  if (req.body.empty()) return json::object();
  auto j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// The row of `machine` when it is one of `pool`'s (the caller's token); else
// the refusal: 503 (the store failed), 404 (no such machine; 403 with
// `unknown_is_forbidden`) or 403 (another pool's machine).
std::expected<MachineRow, HttpServerReply> MachineOfPool(Store& store, std::int64_t machine,
                                                         const std::string& pool,
                                                         bool unknown_is_forbidden = false) {
  auto m = store.machines().Machine(machine);
  if (!m) return std::unexpected(ErrorReply(503, m.error().message));
  const std::string refused = "machine " + std::to_string(machine) + " is not of this token's pool";
  if (!*m) {
    if (unknown_is_forbidden) return std::unexpected(ErrorReply(403, refused));
    return std::unexpected(
        ErrorReply(404, "machine " + std::to_string(machine) + " does not exist"));
  }
  if ((*m)->pool != pool) return std::unexpected(ErrorReply(403, refused));
  return std::move(**m);
}

}  // namespace

std::string RunLogPath(const std::string& data_dir, std::int64_t run_id) {
  return (fs::path(data_dir) / "runs" / std::to_string(run_id) / "output.log").string();
}

// ---- WorkerApi ----------------------------------------------------------------

WorkerApi::~WorkerApi() { StopWaiting(); }

void WorkerApi::NotifyWork() {
  {
    MutexLock lock(work_mu_);
    ++work_generation_;
  }
  work_cv_.notify_all();
}

int WorkerApi::WaitingPolls() {
  MutexLock lock(work_mu_);
  return waiting_polls_;
}

void WorkerApi::StopWaiting() {
  {
    MutexLock lock(work_mu_);
    stop_waiting_ = true;
  }
  work_cv_.notify_all();
}

std::map<std::pair<std::string, int>, std::int64_t> WorkerApi::RequestCounts() {
  MutexLock lock(counters_mu_);
  return requests_;
}

HttpServerReply WorkerApi::Handle(const HttpServerRequest& req, const std::string& path) {
  std::string route = "unknown";
  HttpServerReply reply;
  try {
    reply = Route(req, path, route);
  } catch (const json::exception& e) {
    reply = ErrorReply(400, std::string("bad request body: ") + e.what());
  }
  if (reply.status == 0) return reply;  // headers_only: admitted, counted with the body
  if (reply.status >= 400) {
    spdlog::debug("worker API {} {}: {} {}", req.method, path, reply.status, reply.body);
  }
  MutexLock lock(counters_mu_);
  ++requests_[{route, reply.status}];
  return reply;
}

HttpServerReply WorkerApi::Route(const HttpServerRequest& req, const std::string& path,
                                 std::string& route) {
  // /api/v1/workers/register | /api/v1/workers/{id}/lease | /api/v1/runs/{id}/{what}
  std::vector<std::string> parts;
  for (size_t i = 1; i <= path.size();) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  // parts: api v1 workers register | api v1 workers ID lease | api v1 runs ID WHAT
  const bool workers = parts.size() >= 4 && parts[2] == "workers";
  const bool runs = parts.size() == 5 && parts[2] == "runs";
  if (workers && parts.size() == 4 && parts[3] == "register") {
    route = "register";
  } else if ((workers && parts.size() == 5 && (parts[4] == "lease" || parts[4] == "leave")) ||
             (runs && (RunRoutes().contains(parts[4]) || parts[4] == "gang"))) {
    route = parts[4];
  } else {
    return ErrorReply(404, "no route " + path);
  }
  if (req.method != "POST") return ErrorReply(405, route + ": POST only");
  if (req.body_too_large) return ErrorReply(413, route + ": body over the server's limit");

  // Authentication: the bearer token names the pool.
  auto auth = FindHeader(req.headers, "Authorization");
  if (!auth || !auth->starts_with("Bearer ") || std::string(Trim(auth->substr(7))).empty()) {
    return ErrorReply(401, "missing Authorization: Bearer <pool token>");
  }
  std::string hash = Sha256Hex(std::string(Trim(auth->substr(7))));
  std::optional<std::string> pool;
  {
    MutexLock lock(ctx_.write_mu);
    auto found = ctx_.write_store->machines().PoolForTokenHash(hash);
    if (!found) return ErrorReply(503, found.error().message);
    pool = *found;
  }
  if (!pool) return ErrorReply(401, "unknown worker token");
  if (req.headers_only) return {0, "", ""};

  if (route == "register") return Register(*pool, req);
  auto id = ParseId(parts[3]);
  if (!id) return ErrorReply(404, "no route " + path + " (bad id)");
  if (route == "lease") return Lease(*pool, *id, req);
  if (route == "leave") return Leave(*pool, *id);
  if (route == "gang") return Gang(*pool, *id, req);
  return RunRoute(*pool, *id, route, req);
}

HttpServerReply WorkerApi::Register(const std::string& pool, const HttpServerRequest& req) {
  auto body = Body(req);
  if (!body) return ErrorReply(400, "register: the body is not a JSON object");
  auto parsed = ParseRegisterRequest(*body);
  if (!parsed) return ErrorReply(400, parsed.error().message);
  Machines::WorkerRegistration r;
  r.pool = pool;
  r.name = parsed->name;
  r.hostname = parsed->hostname;
  r.pid = parsed->pid;
  r.slots = parsed->slots;
  r.gpus = static_cast<int>(parsed->gpus.size());
  const json resources = ResourcesJson(*parsed);
  r.resources_json = resources.dump();
  Result<MachineRow> m;
  {
    MutexLock lock(ctx_.write_mu);
    m = ctx_.write_store->machines().RegisterWorker(r, ctx_.clock().Now());
  }
  if (!m) {
    // A name of another pool is not this token's machine.
    int status = m.error().kind == ErrorKind::kInvalidArgument ? 403 : StatusOf(m.error());
    return ErrorReply(status, m.error().message);
  }
  spdlog::info("worker registered: machine {} ({}) of pool {}, {} slots, {} GPUs, host {}", m->id,
               LogSafe(m->name), pool, m->slots, m->gpus, LogSafe(m->hostname));
  if (!parsed->sandbox.empty()) {
    const std::string& form = parsed->sandbox;
    const std::string& note = parsed->sandbox_note;
    const std::string line =
        fmt::format("machine {}: sandbox {}{}", LogSafe(m->name.empty() ? m->hostname : m->name),
                    LogSafe(form), note.empty() ? "" : " (" + LogSafe(note) + ")");
    if (form == "bwrap") {
      spdlog::info("{}", line);
    } else {
      spdlog::warn("{}", line);
    }
  }
  const PoolSpec* spec = ctx_.config().FindPool(pool);
  PoolSpec defaults;
  if (!spec) spec = &defaults;
  NotifyWork();  // a new machine may take work a waiting call could not
  return Json(200, ToJson(RegisterAnswer{m->id, m->name, pool, ctx_.options().lease_ms,
                                         ctx_.options().heartbeat_ms, spec->orphan_timeout_ms,
                                         spec->runs_per_gpu, spec->self_stop}));
}

// A worker that ends on its own (--once, drained, SIGTERM) says so. A machine
// started by hand is stopped in the store at once (its runs, if any, back to
// the queue); a provider's machine stays for the fleet, which stops it.
HttpServerReply WorkerApi::Leave(const std::string& pool, std::int64_t machine) {
  MutexLock lock(ctx_.write_mu);
  auto m = MachineOfPool(*ctx_.write_store, machine, pool);
  if (!m) return m.error();
  if (m->provider != "manual") return Json(200, {{"state", m->state}});
  if (m->state == "stopped") return Json(200, {{"state", "stopped"}});
  auto returned =
      ctx_.write_store->machines().ForgetMachine(machine, ctx_.clock().Now(), "its worker left");
  if (!returned) return ErrorReply(StatusOf(returned.error()), returned.error().message);
  spdlog::info("worker {} ({}) of pool {} left{}", machine, m->name, pool,
               *returned ? "; " + std::to_string(*returned) + " run(s) back in the queue" : "");
  if (*returned) NotifyWork();
  return Json(200, {{"state", "stopped"}});
}

HttpServerReply WorkerApi::Lease(const std::string& pool, std::int64_t machine,
                                 const HttpServerRequest& req) {
  auto body = Body(req);
  if (!body) return ErrorReply(400, "lease: the body is not a JSON object");
  const PoolSpec* spec = ctx_.config().FindPool(pool);
  const LeaseRequest request = ParseLeaseRequest(*body);
  Machines::LeaseLimits limits;
  limits.max_runs = request.max_runs;
  limits.free_gpus = request.free_gpus;
  limits.runs_per_gpu =
      std::max(1, request.runs_per_gpu.value_or(spec ? spec->runs_per_gpu : 1));
  limits.fuse_max = std::max(1, request.fuse_max);
  TimeMs wait_ms = std::clamp<TimeMs>(request.wait_ms, 0, ctx_.options().max_wait_ms);
  if (limits.max_runs <= 0) wait_ms = 0;  // no free slot: nothing to wait for

  {
    MutexLock lock(ctx_.write_mu);
    auto m = MachineOfPool(*ctx_.write_store, machine, pool);
    if (!m) return m.error();
    // A worker asks for what its free slots take; never more than the slots
    // its machine registered.
    limits.max_runs = std::min(limits.max_runs, std::max(1, m->slots));
  }

  bool counted = false;
  auto uncount = [&] {
    if (!counted) return;
    MutexLock lock(work_mu_);
    --waiting_polls_;
    counted = false;
  };
  // Waited through the clock, so a test's FakeClock drives the wait.
  const TimeMs deadline = ctx_.clock().Now() + wait_ms;
  while (true) {
    std::uint64_t seen;
    {
      MutexLock lock(work_mu_);
      seen = work_generation_;
    }
    // The first try always leases (it also records that the worker called);
    // a re-check reads first and writes only when there may be something.
    bool may = true;
    if (counted) {
      MutexLock lock(ctx_.read_mu);
      auto m = ctx_.read_store->machines().MayLease(machine, ctx_.clock().Now());
      may = !m || *m;
    }
    Result<std::vector<LeasedRun>> leased = std::vector<LeasedRun>{};
    if (may) {
      MutexLock lock(ctx_.write_mu);
      leased = ctx_.write_store->machines().LeaseForMachine(machine, limits, ctx_.clock().Now(),
                                                            ctx_.options().lease_ms);
    }
    if (!leased) {
      uncount();
      if (leased.error().kind == ErrorKind::kConflict) {
        // Draining (or stopping, stopped, failed): lease nothing more, finish, exit.
        return Json(200, ToJson(LeaseAnswer{"draining", {}}));
      }
      return ErrorReply(StatusOf(leased.error()), leased.error().message);
    }
    if (!leased->empty()) {
      uncount();
      return Json(200, ToJson(LeaseAnswer{"ready", std::move(*leased)}));
    }
    MutexLock lock(work_mu_);
    if (!counted) {
      if (waiting_polls_ >= ctx_.options().max_long_polls) {
        lock.Unlock();
        return Json(200, ToJson(LeaseAnswer{"ready", {}}));
      }
      ++waiting_polls_;
      counted = true;
    }
    const TimeMs now = ctx_.clock().Now();
    if (stop_waiting_ || now >= deadline) {
      lock.Unlock();
      uncount();
      if (wait_ms > 0) {  // the worker is still there at the end of its wait
        MutexLock write(ctx_.write_mu);
        (void)ctx_.write_store->machines().TouchWorker(machine, ctx_.clock().Now(), false);
      }
      return Json(200, ToJson(LeaseAnswer{"ready", {}}));
    }
    ctx_.clock().WaitUntil(
        lock.native(), work_cv_, std::min<TimeMs>(deadline, now + ctx_.options().recheck_ms),
        [&]() REQUIRES(work_mu_) { return stop_waiting_ || work_generation_ != seen; });
  }
}

const std::map<std::string, WorkerApi::RunHandler, std::less<>>& WorkerApi::RunRoutes() {
  // POST /api/v1/runs/{id}/{what}: one handler per `what`.
  static const std::map<std::string, RunHandler, std::less<>> kRoutes = {
      {"heartbeat", &WorkerApi::Heartbeat}, {"metrics", &WorkerApi::Metrics},
      {"complete", &WorkerApi::Complete},   {"log", &WorkerApi::Log},
      {"source", &WorkerApi::RunSource},
  };
  return kRoutes;
}

HttpServerReply WorkerApi::RunRoute(const std::string& pool, std::int64_t run_id,
                                    const std::string& what, const HttpServerRequest& req) {
  std::optional<json> body;
  std::int64_t token = 0;
  std::optional<std::int64_t> caller;  // the machine calling: the body's worker_id or a header
  if (what == "log") {
    auto t = FindHeader(req.headers, "X-Trainq-Token");
    auto parsed = t ? ParseId(std::string(Trim(*t))) : std::nullopt;
    if (!parsed) return ErrorReply(400, "log: X-Trainq-Token header missing or not a number");
    token = *parsed;
  } else {
    body = Body(req);
    if (!body) return ErrorReply(400, what + ": the body is not a JSON object");
    auto envelope = ParseRunEnvelope(*body, what);
    if (!envelope) return ErrorReply(400, envelope.error().message);
    token = envelope->token;
    caller = envelope->worker_id;
  }

  // Ownership: a current lease belongs to a machine of this token's pool (and
  // to the calling machine when the body names it). A stale token is 409
  // whoever holds the run now: the caller must forget it.
  std::int64_t machine = 0;
  TimeMs now = ctx_.clock().Now();
  {
    MutexLock lock(ctx_.write_mu);
    if (auto st = ctx_.write_store->machines().CheckRunLease(run_id, token); !st) {
      // A success after the lease expired goes on: Store::Complete takes it
      // when nobody else holds the run, and refuses (and we log) otherwise.
      bool late_success = what == "complete" && st.error().kind == ErrorKind::kConflict &&
                          body && body->value("outcome", std::string()) == "succeeded";
      // The output a cancelled attempt wrote before its worker stopped it:
      // taken from the lease that ran it, so `trainq logs` keeps it.
      bool cancelled_log = what == "log" && st.error().kind == ErrorKind::kConflict &&
                           ctx_.write_store->runs().IsCancelledLease(run_id, token).value_or(false);
      if (!late_success && !cancelled_log) {
        return ErrorReply(StatusOf(st.error()), st.error().message);
      }
    }
    auto mid = ctx_.write_store->machines().RunMachine(run_id);
    if (!mid) return ErrorReply(StatusOf(mid.error()), mid.error().message);
    if (!*mid) {
      return ErrorReply(403, "run " + std::to_string(run_id) + " is not leased to a worker machine");
    }
    machine = **mid;
    auto m = ctx_.write_store->machines().Machine(machine);
    if (!m) return ErrorReply(503, m.error().message);
    if (!*m || (*m)->pool != pool) {
      return ErrorReply(403, "run " + std::to_string(run_id) + " is leased to another pool's machine");
    }
    // The calling machine must say who it is (the pool token is shared by
    // all of the pool's machines): the body's worker_id, or the
    // X-Trainq-Worker header where the body is not JSON (log).
    if (!caller) {
      if (auto h = FindHeader(req.headers, "X-Trainq-Worker")) caller = ParseId(std::string(Trim(*h)));
    }
    if (!caller) {
      return ErrorReply(400, what + ": \"worker_id\" (or an X-Trainq-Worker header) is "
                                    "required: the machine the run is leased to");
    }
    if (*caller != machine && !GangMemberOn(*ctx_.write_store, run_id, *caller)) {
      return ErrorReply(403, "run " + std::to_string(run_id) + " is leased to machine " +
                            std::to_string(machine));
    }
  }

  RunCall call{run_id, token, machine, now, body ? std::move(*body) : json(), req};
  return (this->*RunRoutes().find(what)->second)(call);
}

HttpServerReply WorkerApi::RunSource(RunCall& c) {
  {
    MutexLock lock(ctx_.write_mu);
    (void)ctx_.write_store->machines().TouchWorker(c.machine, c.now, false);
  }
  return Source(c.run_id);
}

HttpServerReply WorkerApi::Log(RunCall& c) {
  auto reply = AppendLog(c.run_id, c.token, c.req);
  MutexLock lock(ctx_.write_mu);
  (void)ctx_.write_store->machines().TouchWorker(c.machine, c.now, false);
  return reply;
}

HttpServerReply WorkerApi::Heartbeat(RunCall& c) {
  const HeartbeatRequest beat = ParseHeartbeatRequest(c.body);
  MutexLock lock(ctx_.write_mu);
  Store& store = *ctx_.write_store;
  const std::int64_t run_id = c.run_id, token = c.token, machine = c.machine;
  const TimeMs now = c.now;
  // One transaction, one commit: the start (the first beat), the lease's new
  // expiry and the machine's last_seen_ms. Relaxed (no fsync of its own):
  // 1,000 heartbeats a second each waiting on an fsync put their p99 at the
  // disk's worst; a power loss losing the newest beats only moves expiries
  // back, and the next ordinary commit makes them durable.
  TimeMs expires = 0;
  auto beaten = store.InRelaxedWriteTransaction([&]() -> Status {
    if (beat.started) {
      auto run = store.runs().Run(run_id);
      if (run && *run && (*run)->state == RunState::kLeased) {
        TRY(store.runs().MarkRunning(run_id, token, now, RunLogPath(ctx_.DataDir(), run_id)));
      }
    }
    ASSIGN_OR_RETURN(expires, store.runs().Heartbeat(run_id, token, now, ctx_.options().lease_ms));
    (void)store.machines().TouchWorker(machine, now, true);
    return {};
  });
  if (!beaten) return ErrorReply(StatusOf(beaten.error()), beaten.error().message);
  return Json(200, ToJson(HeartbeatAnswer{expires}));
}

HttpServerReply WorkerApi::Metrics(RunCall& c) {
  auto request = ParseMetricsRequest(c.body);
  if (!request) return ErrorReply(400, request.error().message);
  MutexLock lock(ctx_.write_mu);
  Store& store = *ctx_.write_store;
  const std::int64_t run_id = c.run_id, token = c.token, machine = c.machine;
  const TimeMs now = c.now;
  const std::vector<MetricPoint>& points = request->points;
  auto stored = store.runs().MetricCount(run_id);
  if (!stored) return ErrorReply(StatusOf(stored.error()), stored.error().message);
  if (*stored + static_cast<std::int64_t>(points.size()) > kMaxMetricPointsPerRun) {
    return ErrorReply(413, "metrics: run " + std::to_string(run_id) + " would have over " +
                               std::to_string(kMaxMetricPointsPerRun) + " points");
  }
  if (auto st = store.runs().AddMetrics(run_id, token, points, now); !st) {
    return ErrorReply(StatusOf(st.error()), st.error().message);
  }
  (void)store.machines().TouchWorker(machine, now, true);
  return Json(200, json::object());
}

HttpServerReply WorkerApi::Complete(RunCall& c) {
  auto request = ParseCompleteRequest(c.body);
  if (!request) return ErrorReply(400, request.error().message);
  const CompleteRequest& r = *request;
  MutexLock lock(ctx_.write_mu);
  Store& store = *ctx_.write_store;
  const std::int64_t run_id = c.run_id, token = c.token, machine = c.machine;
  const TimeMs now = c.now;
  // One transaction: the result, the machine's last_seen_ms and the adaptive
  // repeats it calls for commit together, so nobody reading the queue (serve
  // --until-idle) sees a batch finished that is about to grow.
  bool grew = false;
  std::string state;
  auto decided = store.InWriteTransaction([&]() -> Status {
    if (r.outcome == "succeeded") {
      TRY(store.runs().Complete(run_id, token, now, *r.metric_value, r.exit_code.value_or(0)));
      state = "succeeded";
    } else if (r.outcome == "failed") {
      // retry false: a configuration error (agent/runner/run_process.h), dead now.
      ASSIGN_OR_RETURN(RunState next,
                       store.runs().FailRun(run_id, token, now,
                                     r.error.empty() ? "failed on the worker" : r.error,
                                     r.exit_code, r.retry));
      state = std::string(RunStateName(next));
    } else {  // interrupted
      TRY(store.runs().Interrupt(run_id, token, now, r.error.empty() ? "worker stopped" : r.error));
      state = "queued";
    }
    (void)store.machines().TouchWorker(machine, now, true);
    if (state != "queued") {
      // Adaptive repeats: a batch whose spread is still too wide for its
      // `until` grows by `step` runs (agent/results/analysis.h).
      if (auto row = store.runs().Run(run_id); row && *row) {
        auto added = ExtendIfNeeded(store, (*row)->batch_id, now);
        if (!added) {
          spdlog::warn("run {}: adaptive repeats: {}", run_id, added.error().message);
        } else if (*added > 0) {
          grew = true;
        }
      }
    }
    return {};
  });
  if (!decided) {
    if (r.outcome == "succeeded" && decided.error().kind == ErrorKind::kConflict) {
      spdlog::warn("run {}: a success refused: {}", run_id, decided.error().message);
    }
    return ErrorReply(StatusOf(decided.error()), decided.error().message);
  }
  if (grew) NotifyWork();
  if (state == "queued") NotifyWork();  // back in the queue: a waiting worker may take it
  return Json(200, ToJson(CompleteAnswer{state}));
}

// POST /api/v1/runs/{id}/gang: a gang member's heartbeat ("beat") or result
// ("complete"), named by node_rank and worker_id (queue/store.h, gangs). A
// stale token is 409: the run failed, was cancelled or leased again, and the
// member must stop its processes.
HttpServerReply WorkerApi::Gang(const std::string& pool, std::int64_t run_id,
                                const HttpServerRequest& req) {
  auto body = Body(req);
  if (!body) return ErrorReply(400, "gang: the body is not a JSON object");
  auto parsed = ParseGangRequest(*body);
  if (!parsed) return ErrorReply(400, parsed.error().message);
  const GangMemberId& id = std::visit([](const auto& r) -> const GangMemberId& { return r.member; },
                                      *parsed);
  TimeMs now = ctx_.clock().Now();
  MutexLock lock(ctx_.write_mu);
  Store& store = *ctx_.write_store;
  auto m = MachineOfPool(store, id.worker_id, pool, /*unknown_is_forbidden=*/true);
  if (!m) return m.error();
  const int rank = id.node_rank;
  if (const auto* beat = std::get_if<GangBeat>(&*parsed)) {
    if (beat->started && rank == 0) {
      auto run = store.runs().Run(run_id);
      if (run && *run && (*run)->state == RunState::kLeased) {
        if (auto st =
                store.runs().MarkRunning(run_id, id.token, now, RunLogPath(ctx_.DataDir(), run_id));
            !st) {
          return ErrorReply(StatusOf(st.error()), st.error().message);
        }
      }
    }
    auto view =
        store.gangs().GangBeat(run_id, id.token, rank, id.worker_id, now, ctx_.options().lease_ms,
                               beat->started, beat->master_addr, beat->master_port);
    if (!view) return ErrorReply(StatusOf(view.error()), view.error().message);
    (void)store.machines().TouchWorker(id.worker_id, now, true);
    return Json(200, ToJson(GangBeatAnswer{view->master_addr, view->master_port, view->expires_ms}));
  }
  if (const auto* log = std::get_if<GangLog>(&*parsed)) {
    // A rank's output, sent by its member before it reports: kept beside the
    // run's output.log (rank 0's is that log), listed by `trainq logs`.
    // This attempt's member, even after the run failed (a node killed
    // because another failed still sends its ranks' logs).
    auto member = store.gangs().GangMemberOf(run_id, rank);
    if (!member) return ErrorReply(503, member.error().message);
    if (!*member || (*member)->token != id.token || (*member)->machine_id != id.worker_id) {
      return ErrorReply(409, "gang: run " + std::to_string(run_id) + " node " +
                                 std::to_string(rank) + " is not this member's (stale token)");
    }
    fs::path run_log = RunLogPath(ctx_.DataDir(), run_id);
    std::error_code ec;
    fs::create_directories(run_log.parent_path(), ec);
    std::string rank_log =
        (run_log.parent_path() / ("rank-" + std::to_string(log->rank) + ".log")).string();
    if (auto st = WriteFile(rank_log, log->text); !st) return ErrorReply(503, st.error().message);
    if (log->rank == 0) {
      if (auto st = WriteFile(run_log.string(), log->text); !st) {
        return ErrorReply(503, st.error().message);
      }
    }
    return Json(200, {{"rank", log->rank}, {"bytes", log->text.size()}});
  }
  const auto& done = std::get<GangComplete>(*parsed);
  std::string state;
  if (done.outcome == "succeeded") {
    auto finished = store.gangs().GangMemberSucceeded(run_id, id.token, rank, id.worker_id, now,
                                                      done.metric_value);
    if (!finished) return ErrorReply(StatusOf(finished.error()), finished.error().message);
    state = *finished ? "succeeded" : "running";
  } else {
    // Check the member first: a stale or foreign call changes nothing.
    auto view = store.gangs().GangBeat(run_id, id.token, rank, id.worker_id, now,
                                       ctx_.options().lease_ms, false, "", 0);
    if (!view) return ErrorReply(StatusOf(view.error()), view.error().message);
    std::string why = "node " + std::to_string(rank) + " (" + m->name + "): " +
                      (done.error.empty() ? "failed on the worker" : done.error);
    if (done.outcome == "failed") {
      auto st = store.runs().FailRun(run_id, id.token, now, why, done.exit_code, done.retry);
      if (!st) return ErrorReply(StatusOf(st.error()), st.error().message);
      state = std::string(RunStateName(*st));
    } else {
      auto st = store.runs().Interrupt(run_id, id.token, now, why);
      if (!st) return ErrorReply(StatusOf(st.error()), st.error().message);
      state = "queued";
    }
    spdlog::info("gang run {}: {}: {}", run_id, state, why);
  }
  (void)store.machines().TouchWorker(id.worker_id, now, true);
  if (state != "running") NotifyWork();  // its machines are free again
  return Json(200, ToJson(CompleteAnswer{state}));
}

// The commit a run needs, as a git packfile (GitRepo::PackCommit), for a
// worker that cannot reach the repository itself (a cloud machine given the
// path of the server's mirror). Built outside the write lock.
HttpServerReply WorkerApi::Source(std::int64_t run_id) {
  std::string repo_url, sha;
  {
    MutexLock lock(ctx_.write_mu);
    auto run = ctx_.write_store->runs().Run(run_id);
    if (!run) return ErrorReply(503, run.error().message);
    if (!*run) return ErrorReply(404, "source: no run " + std::to_string(run_id));
    auto batch = ctx_.write_store->runs().Batch((*run)->batch_id);
    if (!batch) return ErrorReply(503, batch.error().message);
    if (!*batch) return ErrorReply(404, "source: run " + std::to_string(run_id) + " has no batch");
    repo_url = (*batch)->repo_url;
    sha = (*run)->sha;
  }
  std::error_code ec;
  std::string dir = repo_url;
  if (!fs::is_directory(dir, ec) && repo_url.find("://") != std::string::npos) {
    dir = Mirror::PathFor(ctx_.DataDir(), repo_url);
  }
  if (!fs::is_directory(dir, ec)) {
    return ErrorReply(404, "source: the server has no copy of " + repo_url);
  }
  std::string key = dir + "\n" + sha;
  MutexLock lock(pack_mu_);
  if (key != pack_key_) {
    auto repo = GitRepo::Open(dir);
    if (!repo) return ErrorReply(StatusOf(repo.error()), "source: " + repo.error().message);
    auto pack = repo->PackCommit(sha);
    if (!pack) return ErrorReply(StatusOf(pack.error()), "source: " + pack.error().message);
    pack_ = std::move(*pack);
    pack_key_ = key;
    spdlog::info("run {}: serving commit {} as a {} byte packfile", run_id, sha.substr(0, 12),
                 pack_.size());
  }
  HttpServerReply reply;
  reply.status = 200;
  reply.content_type = "application/x-git-packfile";
  reply.body = pack_;
  return reply;
}

HttpServerReply WorkerApi::AppendLog(std::int64_t run_id, std::int64_t token,
                                     const HttpServerRequest& req) {
  auto off = FindHeader(req.headers, "X-Trainq-Offset");
  std::int64_t offset = 0;
  if (off) {
    std::string t = std::string(Trim(*off));
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), offset);
    if (ec != std::errc() || p != t.data() + t.size() || offset < 0) {
      return ErrorReply(400, "log: X-Trainq-Offset must be a byte offset, got \"" + *off + "\"");
    }
  }
  std::string path = RunLogPath(ctx_.DataDir(), run_id);
  std::string marker_path = path + ".attempt";
  MutexLock lock(log_mu_);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return ErrorReply(503, "log: " + ec.message());
  std::int64_t size = fs::exists(path, ec) ? static_cast<std::int64_t>(fs::file_size(path, ec)) : 0;
  // Where this attempt's bytes start in output.log: "<token> <base>" in the
  // marker; a new token starts a new section.
  std::int64_t base = -1;
  {
    std::ifstream in(marker_path);
    std::int64_t t = 0, b = 0;
    if (in >> t >> b && t == token && b <= size) base = b;
  }
  if (base < 0) {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    if (size > 0) {
      std::string header = "\n--- trainq: lease " + std::to_string(token) + " ---\n";
      out << header;
      size += static_cast<std::int64_t>(header.size());
    }
    base = size;
    std::ofstream marker(marker_path, std::ios::trunc);
    marker << token << " " << base << "\n";
    if (!out || !marker) return ErrorReply(503, "log: could not write " + path);
  }
  std::int64_t stored = size - base;
  // Past the per-attempt cap, bytes are taken and dropped: the worker moves on.
  auto accepted = static_cast<std::int64_t>(offset + std::ssize(req.body));
  if (stored >= kMaxLogBytesPerAttempt) {
    return Json(200, {{"size", std::max(stored, accepted)}});
  }
  if (offset > stored) {
    return Json(400, {{"error", "log: offset " + std::to_string(offset) + " is past the " +
                                    std::to_string(stored) + " bytes stored; resend from there"},
                      {"size", stored}});
  }
  std::int64_t skip = stored - offset;
  if (skip < static_cast<std::int64_t>(req.body.size())) {
    std::int64_t n = std::min<std::int64_t>(std::ssize(req.body) - skip,
                                            kMaxLogBytesPerAttempt - stored);
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out.write(req.body.data() + skip, static_cast<std::streamsize>(n));
    stored += n;
    if (stored >= kMaxLogBytesPerAttempt) {
      out << "\n--- trainq: log truncated at " << (kMaxLogBytesPerAttempt >> 20)
          << " MB for this attempt ---\n";
      stored = std::max(stored, accepted);
    }
    out.flush();
    if (!out) return ErrorReply(503, "log: could not write " + path);
  }
  return Json(200, {{"size", stored}});
}

}  // namespace trainq
