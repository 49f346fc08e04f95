#include "agent/daemon/inproc_lease_client.h"

#include "agent/daemon/server.h"

namespace trainq {

Result<WireAnswer> InProcLeaseClient::Send(const WireCall& call) {
  HttpServerRequest req;
  req.method = "POST";
  req.path = call.path;
  req.headers = {{"Authorization", "Bearer " + token_}, {"Content-Type", call.content_type}};
  req.headers.insert(req.headers.end(), call.headers.begin(), call.headers.end());
  req.body = call.body;
  HttpServerReply reply = server_.Handle(req);
  WireAnswer a;
  a.status = reply.status;
  a.body = nlohmann::json::parse(reply.body, nullptr, false);
  if (a.body.is_discarded()) a.body = nlohmann::json::object();
  a.raw = std::move(reply.body);
  return a;
}

}  // namespace trainq
