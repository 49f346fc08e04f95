// The worker protocol's server side: `WorkerApi`, the /api/v1/workers/* and
// /api/v1/runs/* routes (one of the parts Server's route table composes), and
// the pool tokens.
//
// Auth: `Authorization: Bearer <pool token>`. The token names the pool; the
// store keeps only its SHA-256 hex (pool_tokens), compared in constant time.
// Each pool's token is the pool's `token:` secret when the config gives one,
// else <data_dir>/tokens/<pool>.token, created once (32 random bytes as hex,
// mode 0600) and kept across restarts.
//
// Routes (JSON bodies; errors are {"error": "one line"}):
//   POST /api/v1/workers/register      -> the machine row becomes ready
//   POST /api/v1/workers/{id}/lease    long poll (wait_ms, capped at 20 s)
//   POST /api/v1/runs/{id}/heartbeat   {"token", "started"}
//   POST /api/v1/runs/{id}/metrics     {"token", "points"}
//   POST /api/v1/runs/{id}/complete    {"token", "outcome", ...}
//   POST /api/v1/runs/{id}/log         raw bytes; X-Trainq-Token, X-Trainq-Offset
// 401 missing/unknown token; 403 a machine or run of another pool (or, when
// the body names "worker_id", of another machine); 404 no such machine/run;
// 409 a stale lease (the worker forgets the run) or a draining machine at
// registration. See docs/design/run-engine.md, "Worker protocol".
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/crypto.h"
#include "core/result.h"
#include "core/thread_annotations.h"
#include "queue/types.h"

namespace trainq {

class ServerContext;
class Store;

// The routes above over the context's stores. Thread-safe: Handle is called
// from the listener's threads at once; a lease long poll holds its caller's
// thread while it waits (at most `max_long_polls` wait at once, further lease
// calls answer at once).
class WorkerApi {
 public:
  explicit WorkerApi(ServerContext& context) : ctx_(context) {}
  ~WorkerApi();  // wakes waiting lease calls

  // Answers /api/v1/workers/... and /api/v1/runs/... and counts the answer by
  // route and status. With `request.headers_only` (the listener's admission,
  // before the body), status 0 means the token is a pool's: read the body.
  HttpServerReply Handle(const HttpServerRequest& request, const std::string& path);

  // Work may be leasable (a submit, a push, a completion, a run back in the
  // queue): waiting lease calls look at the store again now.
  void NotifyWork();
  // Waiting lease calls answer now and new ones do not wait (shutdown).
  void StopWaiting();
  // Lease calls waiting right now.
  int WaitingPolls();
  // Requests since start by (route, HTTP status), for /metrics.
  std::map<std::pair<std::string, int>, std::int64_t> RequestCounts();

  // Per run (log: per attempt): past these, points are refused (413) and log
  // bytes dropped after a "truncated" line.
  static constexpr std::int64_t kMaxMetricPointsPerRun = 100'000;
  static constexpr std::int64_t kMaxLogBytesPerAttempt = std::int64_t{256} << 20;

 private:
  HttpServerReply Route(const HttpServerRequest& request, const std::string& path,
                        std::string& route);
  HttpServerReply Register(const std::string& pool, const HttpServerRequest& request);
  HttpServerReply Lease(const std::string& pool, std::int64_t machine,
                        const HttpServerRequest& request);
  HttpServerReply Leave(const std::string& pool, std::int64_t machine);
  // POST /api/v1/runs/{id}/{what}: checks the token and that the run is
  // leased to a machine of the caller's pool, then calls RunRoutes()[what].
  HttpServerReply RunRoute(const std::string& pool, std::int64_t run_id, const std::string& what,
                           const HttpServerRequest& request);
  struct RunCall {
    std::int64_t run_id;
    std::int64_t token;
    std::int64_t machine;  // the machine the run is leased to (the caller's)
    TimeMs now;
    nlohmann::json body;  // null for `log`, whose body is the log bytes
    const HttpServerRequest& req;
  };
  using RunHandler = HttpServerReply (WorkerApi::*)(RunCall&);
  static const std::map<std::string, RunHandler, std::less<>>& RunRoutes();
  HttpServerReply Heartbeat(RunCall& call);
  HttpServerReply Metrics(RunCall& call);
  HttpServerReply Complete(RunCall& call);
  HttpServerReply Log(RunCall& call);
  HttpServerReply RunSource(RunCall& call);
  HttpServerReply Gang(const std::string& pool, std::int64_t run_id,
                       const HttpServerRequest& request);
  HttpServerReply AppendLog(std::int64_t run_id, std::int64_t token,
                            const HttpServerRequest& request);
  HttpServerReply Source(std::int64_t run_id);

  ServerContext& ctx_;

  // Lease long polls wait on work_cv_; work_generation_ counts NotifyWork() calls.
  Mutex work_mu_;
  std::condition_variable work_cv_;
  std::uint64_t work_generation_ GUARDED_BY(work_mu_) = 0;
  int waiting_polls_ GUARDED_BY(work_mu_) = 0;
  bool stop_waiting_ GUARDED_BY(work_mu_) = false;

  // Appends to run logs (the files under data_dir; no fields).
  Mutex log_mu_;

  // The last packfile served (repo dir + sha -> pack): the runs of one batch
  // on several machines ask for the same commit.
  Mutex pack_mu_;
  std::string pack_key_ GUARDED_BY(pack_mu_);
  std::string pack_ GUARDED_BY(pack_mu_);

  // /metrics: requests by (route, status).
  Mutex counters_mu_;
  std::map<std::pair<std::string, int>, std::int64_t> requests_ GUARDED_BY(counters_mu_);
};

// The pool used when the server config has no `pools:`.
inline constexpr const char* kDefaultPool = "local";

// <data_dir>/tokens/<pool>.token
std::string TokenFilePath(const std::string& data_dir, const std::string& pool);

// For each configured pool (or "local" when there is none): the token from the
// config, else read or create its token file; stores the token's SHA-256 hex.
Status EnsurePoolTokens(Store& store, const ServerConfig& config, const std::string& data_dir,
                        TimeMs now);

// The token of `pool`: the config's `token:` secret, else its token file
// (read, or created once). Refused when shorter than 16 characters.
Result<std::string> PoolToken(const ServerConfig& config, const std::string& data_dir,
                              const std::string& pool);

// (The token digest is core/crypto.h's Sha256Hex.)

// <data_dir>/runs/<id>/output.log: where a worker's log of a run is stored.
std::string RunLogPath(const std::string& data_dir, std::int64_t run_id);

}  // namespace trainq
