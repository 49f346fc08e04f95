#include "agent/runner/lease_client.h"

namespace trainq {

Result<WireAnswer> HttpLeaseClient::Send(const WireCall& call) {
  HttpRequest req;
  req.method = "POST";
  req.url = server_ + call.path;
  req.headers = {{"Authorization", "Bearer " + token_}, {"Content-Type", call.content_type}};
  req.headers.insert(req.headers.end(), call.headers.begin(), call.headers.end());
  req.body = call.body;
  req.timeout_ms = call.timeout_ms;
  auto resp = http_.Send(req);
  if (!resp) return std::unexpected(resp.error());
  WireAnswer a;
  a.status = resp->status;
  a.body = nlohmann::json::parse(resp->body, nullptr, false);
  if (a.body.is_discarded()) a.body = nlohmann::json::object();
  a.raw = std::move(resp->body);
  return a;
}

}  // namespace trainq
