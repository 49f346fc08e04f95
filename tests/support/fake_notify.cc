#include "tests/support/fake_notify.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <nlohmann/json.hpp>
#include <set>

namespace trainq::testing {

namespace {

// The fields an incoming webhook takes (chat.postMessage's, less channel
// routing, which a webhook fixes).
const std::set<std::string> kSlackFields = {"text",      "blocks",   "attachments",
                                            "mrkdwn",    "thread_ts", "unfurl_links",
                                            "unfurl_media", "username", "icon_emoji",
                                            "icon_url",  "channel"};

std::string HmacHex(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[mac[i] >> 4];
    out += hex[mac[i] & 15];
  }
  return out;
}

// Every '<' opens a link <http(s)://...|label> or <http(s)://...>, and every
// '&' an entity &amp; &lt; &gt;; a bare '>' is markup too.
std::string TextProblem(const std::string& t) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '&') {
      if (t.compare(i, 5, "&amp;") && t.compare(i, 4, "&lt;") && t.compare(i, 4, "&gt;")) {
        return "unescaped & at " + std::to_string(i);
      }
    } else if (t[i] == '<') {
      size_t end = t.find('>', i);
      if (end == std::string::npos) return "unclosed < at " + std::to_string(i);
      std::string link = t.substr(i + 1, end - i - 1);
      if (!link.starts_with("http://") && !link.starts_with("https://")) {
        return "< that is not a link at " + std::to_string(i);
      }
      if (link.find('<') != std::string::npos) return "< inside a link at " + std::to_string(i);
      i = end;
    } else if (t[i] == '>') {
      return "unescaped > at " + std::to_string(i);
    }
  }
  return "";
}

}  // namespace

std::string SlackPayloadProblem(const TestHttpRequest& r) {
  if (r.method != "POST") return "invalid_payload: method " + r.method;
  if (r.Header("Content-Type").rfind("application/json", 0) != 0) {
    return "invalid_payload: Content-Type " + r.Header("Content-Type");
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "invalid_payload: not a JSON object";
  for (const auto& [k, v] : j.items()) {
    if (!kSlackFields.count(k)) return "invalid_payload: unknown field " + k;
  }
  if (!j.contains("text") || !j["text"].is_string() || j["text"].get<std::string>().empty()) {
    return "no_text";
  }
  const std::string text = j["text"];
  if (text.size() > 40'000) return "invalid_payload: text longer than 40,000";
  if (auto p = TextProblem(text); !p.empty()) return "invalid_payload: " + p;
  return "";
}

FakeSlack::FakeSlack(std::function<TestHttpResponse(const TestHttpRequest&)> before, int port)
    : before_(std::move(before)),
      server_(
          [this](const TestHttpRequest& r) {
            if (before_) {
              auto first = before_(r);
              if (first.status != 0) return first;
            }
            if (r.target != "/services/T000/B000/XXXXXXXXXXXX") {
              return TestHttpResponse{404, "no_service", {}};
            }
            std::string problem = SlackPayloadProblem(r);
            std::lock_guard<std::mutex> lock(mu_);
            if (!problem.empty()) {
              refusals_.push_back(problem);
              return TestHttpResponse{400, problem.substr(0, problem.find(':')), {}};
            }
            texts_.push_back(nlohmann::json::parse(r.body)["text"]);
            return TestHttpResponse{200, "ok", {{"Content-Type", "text/html"}}};
          },
          port) {}

std::vector<std::string> FakeSlack::texts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return texts_;
}

std::vector<std::string> FakeSlack::refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusals_;
}

SignedReceiver::SignedReceiver(std::string key,
                               std::function<TestHttpResponse(const TestHttpRequest&)> before,
                               int port)
    : key_(std::move(key)),
      before_(std::move(before)),
      server_(
          [this](const TestHttpRequest& r) {
            if (before_) {
              auto first = before_(r);
              if (first.status != 0) return first;
            }
            std::lock_guard<std::mutex> lock(mu_);
            const std::string want = "sha256=" + HmacHex(key_, r.body);
            if (r.Header("X-Trainq-Signature-256") != want) {
              ++refused_;
              return TestHttpResponse{401, "bad signature", {}};
            }
            deliveries_.push_back({r.Header("X-Trainq-Delivery"), r.Header("X-Trainq-Event"), r.body});
            return TestHttpResponse{204, "", {}};
          },
          port) {}

std::vector<SignedReceiver::Delivery> SignedReceiver::deliveries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deliveries_;
}

int SignedReceiver::unsigned_or_wrong() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

}  // namespace trainq::testing
