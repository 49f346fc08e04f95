// The worker protocol's server side: pool tokens, and the constants and
// helpers of the /api/v1/workers/* and /api/v1/runs/* routes, which
// Server::Handle dispatches to (implemented in agent/daemon/worker_api.cc).
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

#include <string>

#include "core/crypto.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/types.h"

namespace trainq {

class Store;

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
