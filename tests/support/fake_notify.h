// Receivers of trainq's notifications for tests, over TestHttpServer:
//
// FakeSlack speaks Slack's incoming-webhook contract (api.slack.com,
// "Sending messages using incoming webhooks" and "Formatting text for app
// surfaces"): a POST of a JSON object with `Content-Type: application/json`,
// a non-empty string `text` (else 400 `no_text`), only the fields an
// incoming webhook takes (else 400 `invalid_payload`), at most 40,000
// characters, `&`, `<` and `>` escaped except in a link `<http...|label>`
// (else 400 `invalid_payload`: we call it so; Slack would show the markup).
// Accepted messages answer 200 `ok` and are kept.
//
// SignedReceiver checks a generic webhook's signature the way a receiver
// would: HMAC-SHA256 of the raw body under the shared key, computed here
// with OpenSSL's HMAC() (not trainq's helper), compared with
// `X-Trainq-Signature-256: sha256=<hex>`; a wrong or missing one is 401.
// It keeps each accepted delivery id and body.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/http_server.h"

namespace trainq::testing {

// Why a Slack payload would be refused, or "" when it is fine.
std::string SlackPayloadProblem(const TestHttpRequest& r);

class FakeSlack {
 public:
  // `before` may answer first (a 500, a delay): return status 0 to go on.
  explicit FakeSlack(std::function<TestHttpResponse(const TestHttpRequest&)> before = nullptr,
                     int port = 0);
  std::string url() const { return server_.url() + "/services/T000/B000/XXXXXXXXXXXX"; }
  std::vector<std::string> texts() const;  // accepted messages
  std::vector<std::string> refusals() const;  // why refused ones were
  int requests() const { return static_cast<int>(server_.requests().size()); }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> texts_, refusals_;
  std::function<TestHttpResponse(const TestHttpRequest&)> before_;
  TestHttpServer server_;
};

class SignedReceiver {
 public:
  struct Delivery {
    std::string id;     // X-Trainq-Delivery
    std::string event;  // X-Trainq-Event
    std::string body;
  };
  explicit SignedReceiver(std::string key,
                          std::function<TestHttpResponse(const TestHttpRequest&)> before = nullptr,
                          int port = 0);
  std::string url() const { return server_.url() + "/hooks/trainq"; }
  std::vector<Delivery> deliveries() const;  // accepted, in order
  int unsigned_or_wrong() const;             // refused for their signature
  int requests() const { return static_cast<int>(server_.requests().size()); }
  std::vector<TestHttpRequest> all_requests() const { return server_.requests(); }

 private:
  std::string key_;
  mutable std::mutex mu_;
  std::vector<Delivery> deliveries_;
  int refused_ = 0;
  std::function<TestHttpResponse(const TestHttpRequest&)> before_;
  TestHttpServer server_;
};

}  // namespace trainq::testing
