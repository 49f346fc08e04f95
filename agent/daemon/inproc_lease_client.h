// InProcLeaseClient: the Worker's LeaseClient (agent/runner/lease_client.h)
// for `trainq serve --inproc`: each call of the worker protocol is handed to
// this process's Server (agent/daemon/server.h) as the request the HTTP
// listener would build, with no socket. So an in-process run goes through the
// same server code as a worker's on another machine: the pool token's check,
// the run-ownership checks, the store's transactions, adaptive top-ups after
// a result, the run log kept under the server's data dir.
//
// Thread-safe as Server::Handle is; a lease long poll blocks the caller (the
// worker's thread) until work comes, the wait ends or Server::StopWaiting.
#pragma once

#include <string>

#include "agent/runner/lease_client.h"

namespace trainq {

class Server;

class InProcLeaseClient : public LeaseClient {
 public:
  // `token`: the pool token the worker presents (the `local` pool's, serve's own).
  InProcLeaseClient(Server& server, std::string token)
      : server_(server), token_(std::move(token)) {}
  Result<WireAnswer> Send(const WireCall& call) override;
  std::string Where() const override { return "this serve (in-process)"; }

 private:
  Server& server_;
  std::string token_;
};

}  // namespace trainq
