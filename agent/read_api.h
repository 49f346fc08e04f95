// The read routes of `trainq serve` for hosted CI, which cannot read the
// SQLite file: GET /api/v1/report and GET /api/v1/gate, authenticated by the
// config's `read_token` (Authorization: Bearer TOKEN), and their client side
// (`trainq report --server`, `trainq gate --server`).
//
// The server answers the bytes the local commands print (agent/commands.h
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

#include "agent/commands.h"
#include "agent/server_config.h"
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

// ---- server side ----

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// 0 when the request may read; else the HTTP status to answer (401: missing
// or wrong bearer token, 403: no read token configured). Constant time in the
// token's content.
int CheckReadToken(const ServerConfig& config, const HttpHeaders& headers);

// The configured repository that `name` designates: its url (normalised), its
// project (owner/name) or its short name (the url's last segment without
// .git). Empty `name`: the only repository, when exactly one is configured;
// nullptr when none is. kNotFound / kInvalidArgument name what was asked.
Result<const RepoConfig*> ResolveServerRepo(const ServerConfig& config, const std::string& name);

// ---- client side ----

// The read token: the first line of `token_file`, else $TRAINQ_READ_TOKEN.
// kInvalidArgument says how to give one when neither is set.
Result<std::string> ReadToken(const std::string& token_file);

// The gate's answer: {exit_code, text, json, finished}.
struct RemoteGate {
  int exit_code = 2;
  std::string text;
  nlohmann::json json;
  bool finished = false;
};

class ReadClient {
 public:
  ReadClient(std::string server, std::string token);
  Result<std::string> Report(const ReportQuery& q);
  Result<RemoteGate> Gate(const std::string& rev, const std::string& baseline,
                          const std::string& repo, const std::vector<std::string>& experiments);

 private:
  // GET `path?query` with the token; the body of a 2xx answer, else an
  // error naming the server, the route and the server's reason.
  Result<std::string> Get(const std::string& path, const QueryParams& query);
  std::string base_;
  std::string token_;
  CurlHttpClient http_;
};

// `trainq gate --server`: asks the server's gate; with wait_ms > 0, asks
// again every kGatePollInterval until the decision is `finished` or the time
// is up. Prints what the local gate prints (its text, or its json with
// as_json) and returns its exit code; an HTTP failure is an Error (exit 2).
inline constexpr std::chrono::seconds kGatePollInterval{2};
Result<int> GateFromServer(const GateOptions& o, std::int64_t wait_ms, bool as_json,
                           std::ostream& out);

}  // namespace trainq
