// The read routes of `trainq serve` for hosted CI, which cannot read the
// SQLite file: GET /api/v1/report, /api/v1/gate and /api/v1/logs (`ReadApi`,
// one of the parts Server's route table composes), authenticated by the
// config's `read_token` (Authorization: Bearer TOKEN) or a personal token.
// Their client side is agent/cli/read_client.h.
//
// The server answers the bytes the local commands print (agent/results/report.h
// ReportBytes, the gate's decision), so a CI job sees what a shell on the
// server would. A wrong or missing token gets 401 and a fixed body: nothing
// about what exists. Without a read token in the config the routes answer 403.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

class ServerContext;

// ---- server side ----

// GET /api/v1/report, /api/v1/gate and /api/v1/logs. Thread-safe: each
// request opens its own store connection (a report over a large store must
// not hold the lock that /api/v1/status and /healthz share).
class ReadApi {
 public:
  explicit ReadApi(ServerContext& context) : ctx_(context) {}
  // Checks the read token, then answers `path` (one of the three).
  HttpServerReply Handle(const HttpServerRequest& request, const std::string& path);

 private:
  // GET /api/v1/logs, after Handle's token check.
  HttpServerReply Logs(const HttpServerRequest& request);

  ServerContext& ctx_;
};

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// 0 when the request may read; else the HTTP status to answer (401: missing
// or wrong bearer token, 403: no read token configured). Constant time in the
// token's content.
int CheckReadToken(const ServerConfig& config, const HttpHeaders& headers);
// The same for the config's `admin_token` (POST /api/v1/retry; 403: none
// configured, the route is off).
int CheckAdminToken(const ServerConfig& config, const HttpHeaders& headers);

// The configured repository that `name` designates: its url (normalised), its
// project (owner/name) or its short name (the url's last segment without
// .git). Empty `name`: the only repository, when exactly one is configured;
// nullptr when none is. kNotFound / kInvalidArgument name what was asked.
Result<const RepoConfig*> ResolveServerRepo(const ServerConfig& config, const std::string& name);

}  // namespace trainq
