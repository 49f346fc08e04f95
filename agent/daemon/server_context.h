// What the parts of `trainq serve`'s HTTP server share (agent/daemon/server.h
// composes them): the config, the clock and options, the store connections
// with the mutex of each, and who a bearer token names.
//
// Server owns one; WorkerApi (worker_api.h) and ReadApi (read_api.h) hold a
// reference to it, so neither includes server.h.
//
// Threading: every method is called from the listener's threads at once. The
// stores are public with the mutex that guards each (GUARDED_BY, checked by
// clang: core/thread_annotations.h): a route takes the one it needs for as
// short a time as it can.
#pragma once

#include <optional>
#include <string>

#include "agent/daemon/access.h"
#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/result.h"
#include "core/thread_annotations.h"
#include "queue/store.h"

namespace trainq {

struct ServerOptions {
  std::string data_dir;          // runs/<id>/output.log; "" = the database's directory
  TimeMs lease_ms = 60'000;      // a worker's lease, extended by each heartbeat
  TimeMs heartbeat_ms = 10'000;  // told to workers at registration
  TimeMs max_wait_ms = 20'000;   // a lease long poll waits at most this long
  TimeMs recheck_ms = 250;       // ... and re-reads the store this often (submits from
                                 // other processes do not call NotifyWork)
  int max_long_polls = 32;       // lease calls waiting at once; more answer at once
};

class ServerContext {
 public:
  ServerContext(const ServerConfig& config, std::string db_path, const Clock& clock,
                ServerOptions options);
  // Opens the two store connections.
  Status Open();

  const ServerConfig& config() const { return config_; }
  const std::string& db_path() const { return db_path_; }
  const Clock& clock() const { return clock_; }
  const ServerOptions& options() const { return options_; }
  // options().data_dir, else the database's directory.
  std::string DataDir() const;

  // Who the bearer token names (agent/daemon/access.h): the shared tokens or a
  // personal token (read from the store; `touch` records its use).
  Principal Caller(const HttpServerRequest& request, bool touch);
  // 0 when the caller may read; else 401 (no or a refused token, logged) or
  // 403 (no read token configured and no personal token given).
  int ReadAccess(const HttpServerRequest& request);

  // Every write to the store.
  Mutex write_mu;
  std::optional<Store> write_store GUARDED_BY(write_mu);
  // The reads of the routes that only read (tokens, status, metrics).
  Mutex read_mu;
  std::optional<Store> read_store GUARDED_BY(read_mu);

 private:
  // Set before the listener starts; read by every thread.
  const ServerConfig& config_;
  std::string db_path_;
  const Clock& clock_;
  ServerOptions options_;
  LogLimiter refused_token_log_{60'000};  // personal tokens refused (revoked, expired)
};

}  // namespace trainq
