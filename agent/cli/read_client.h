// The client side of `trainq serve`'s read routes (agent/daemon/read_api.h):
// `trainq report --server` and `trainq gate --server`, for hosted CI; and of
// its one admin route, POST /api/v1/retry (`trainq retry --server`).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "agent/cli/cli.h"
#include "agent/daemon/read_api.h"  // QueryParams
#include "agent/results/report.h"
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

// The read token: the first line of `token_file`, else $TRAINQ_READ_TOKEN,
// else the personal token `trainq login` kept for `server`
// (agent/cli/credentials.h). kInvalidArgument says how to give one when none is.
Result<std::string> ReadToken(const std::string& token_file, const std::string& server = "");
// The admin token (server.yaml admin_token): the first line of `token_file`,
// else $TRAINQ_ADMIN_TOKEN, else the personal token kept for `server`.
Result<std::string> ReadAdminToken(const std::string& token_file, const std::string& server = "");

// The gate's answer: {exit_code, text, json, finished}.
struct RemoteGate {
  int exit_code = 2;
  std::string text;
  nlohmann::json json;
  bool finished = false;
};

// A piece of a run's log from GET /api/v1/logs.
struct RemoteLogChunk {
  std::string bytes;
  std::int64_t next_offset = 0;
  bool run_ended = false;
  std::vector<int> ranks;  // ranks with logs (a gang run)
};

class ReadClient {
 public:
  ReadClient(std::string server, std::string token);
  Result<RemoteLogChunk> Logs(std::int64_t run, std::optional<int> rank, std::int64_t offset);
  Result<std::string> Report(const ReportQuery& q);
  // `correction` ("" = the server's default for the experiments).
  Result<RemoteGate> Gate(const std::string& rev, const std::string& baseline,
                          const std::string& repo, const std::vector<std::string>& experiments,
                          const std::string& correction = "");
  // POST /api/v1/retry (the token must be the admin's): RetryRuns' answer,
  // {"retried": [...]}; the server's refusal (409 for a run that succeeded,
  // 404 for none) as an error with its reason.
  Result<nlohmann::json> Retry(std::int64_t id, bool batch);
  // POST /dash/api/login-link (the read or admin token): {"url", "role",
  // "expires_in_s"}, a one-time sign-in link to the dashboard.
  Result<nlohmann::json> LoginLink();
  // GET /api/v1/whoami: {"who", "role", "personal", "token", "expires_ms"}.
  Result<nlohmann::json> Whoami();
  // GET /api/v1/audit (an admin): {"audit": [...]}, newest first.
  Result<nlohmann::json> Audit(const std::string& since, int limit);

 private:
  // GET `path?query` with the token; the body of a 2xx answer, else an
  // error naming the server, the route and the server's reason.
  Result<std::string> Get(const std::string& path, const QueryParams& query);
  Result<std::string> Post(const std::string& path, const nlohmann::json& body);
  Result<std::string> Send(const std::string& method, const std::string& path,
                           const QueryParams& query, const std::string& body);
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
