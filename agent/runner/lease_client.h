// LeaseClient: how a Worker (agent/runner/worker.h) reaches the queue. Every
// call of the worker protocol goes through one: register, lease, heartbeat,
// metrics, log, complete, source, gang, leave, and the outbox's replays.
//
// The messages are agent/runner/protocol.h's; a LeaseClient only carries them.
// Two carry them today:
//   - HttpLeaseClient (here): POST <server><path> with the pool token
//     (`trainq worker`, workers booted by the fleet);
//   - InProcLeaseClient (agent/daemon/inproc_lease_client.h): the same
//     request handed to the Server's worker routes in this process, with no
//     socket (`trainq serve --inproc`). Both reach the same server code:
//     auth, ownership checks, the store's transactions, adaptive top-ups.
//
// agent/daemon implements it (InProcLeaseClient) and links agent/runner
// whole, for the Worker it runs in `serve --inproc`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/clock.h"
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

// One request of the worker protocol.
struct WireCall {
  std::string path;  // /api/v1/..., always POST
  std::string body;  // JSON, or the raw bytes of a log chunk
  std::string content_type = "application/json";
  HttpHeaders headers;  // X-Trainq-Token / -Offset / -Worker (the token is the client's)
  TimeMs timeout_ms = 15'000;
};

// Its answer: any status (the caller reads 4xx itself); an Error only when
// there was none (no connection, a timeout).
struct WireAnswer {
  int status = 0;
  nlohmann::json body;  // the body parsed; an empty object when it is not JSON
  std::string raw;      // the body as received (a packfile for /source)
};

class LeaseClient {
 public:
  virtual ~LeaseClient() = default;
  virtual Result<WireAnswer> Send(const WireCall& call) = 0;
  // Where the queue is, for log lines: the server's URL (no secrets) or "this serve".
  virtual std::string Where() const = 0;
};

// Over HTTP to `server` (a base URL), with `Authorization: Bearer <token>`.
class HttpLeaseClient : public LeaseClient {
 public:
  HttpLeaseClient(HttpClient& http, std::string server, std::string token)
      : http_(http), server_(std::move(server)), token_(std::move(token)) {}
  Result<WireAnswer> Send(const WireCall& call) override;
  std::string Where() const override { return UrlForLog(server_); }

 private:
  HttpClient& http_;
  std::string server_;
  std::string token_;
};

}  // namespace trainq
