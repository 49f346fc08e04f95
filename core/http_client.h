// HttpClient: the seam through which trainq makes every outbound HTTP call
// (forge status APIs, later worker -> server and cloud APIs).
//
// A response with any HTTP status is a success at this level: the caller
// decides what a 404 or a 503 means. Transport failures come back as Error:
// kUnavailable (refused, reset, DNS, TLS), kTimeout (no answer in time),
// kInvalidArgument (a malformed or non-http(s) URL).
// Error messages name the method and the URL without its query string, and
// never contain header values (tokens travel in headers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace trainq {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The first value of header `name` (case-insensitive), if any.
std::optional<std::string> FindHeader(const HttpHeaders& headers, std::string_view name);

// AWS Signature Version 4, computed by libcurl (CURLOPT_AWS_SIGV4). The keys
// never appear in messages or logs.
struct AwsSigV4 {
  std::string provider;       // "aws:amz:<region>:<service>", e.g. "aws:amz:us-east-1:ec2"
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // "" = none; else sent (and signed) as X-Amz-Security-Token
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  HttpHeaders headers;
  std::string body;
  std::int64_t timeout_ms = 10'000;  // the whole exchange, connection included
  std::optional<AwsSigV4> aws_sigv4 = std::nullopt;  // sign the request (last: keeps {m, url, ...})
  // TLS: trust these certificate authorities instead of the system's (a
  // file, or PEM text), and present a client certificate (PEM text of the
  // certificate and of its key). Never in messages.
  std::string ca_file = {};
  std::string ca_pem = {};
  std::string client_cert_pem = {};
  std::string client_key_pem = {};
};

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;

  bool ok() const { return status >= 200 && status < 300; }
  std::optional<std::string> Header(std::string_view name) const {
    return FindHeader(headers, name);
  }
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // Thread-safe in every implementation: one client may serve several threads.
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;
};

// libcurl, one easy handle per request; http and https only, no redirects
// followed, responses larger than max_response_bytes refused.
class CurlHttpClient final : public HttpClient {
 public:
  explicit CurlHttpClient(std::int64_t max_response_bytes = 64 << 20);
  Result<HttpResponse> Send(const HttpRequest& request) override;

 private:
  std::int64_t max_response_bytes_;
};

// Percent-encodes everything but unreserved characters (RFC 3986), so
// "group/project" becomes "group%2Fproject".
std::string UrlEncode(std::string_view s);
// Undoes it: each %XX becomes its byte (a '%' not followed by two hex digits
// stays), and with `plus_is_space` (an HTML form's body) '+' becomes ' '.
std::string UrlDecode(std::string_view s, bool plus_is_space = false);

// The URL without query string and fragment, for messages.
std::string UrlForLog(std::string_view url);

// The host of an absolute URL as libcurl parses it ("[::1]" comes back as
// "::1"); kInvalidArgument when it is not one.
Result<std::string> UrlHost(std::string_view url);

// Whether a machine other than this one could reach `host`: false for
// localhost, loopback addresses (127.0.0.0/8, ::1, ::ffff:127.x) and the
// unspecified ones (0.0.0.0, ::), which mean "this host" to whoever uses them.
bool HostReachableFromElsewhere(std::string_view host);

}  // namespace trainq
