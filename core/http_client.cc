#include "core/http_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

namespace trainq {

namespace {

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// curl_global_init is not thread-safe; do it once, before any handle exists.
void EnsureCurlInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Exchange {
  HttpResponse* response;
  std::int64_t max_bytes;
  bool too_large = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  size_t bytes = size * n;
  if (static_cast<std::int64_t>(ex->response->body.size() + bytes) > ex->max_bytes) {
    ex->too_large = true;
    return 0;  // aborts the transfer
  }
  ex->response->body.append(data, bytes);
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  size_t bytes = size * n;
  std::string_view line(data, bytes);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {
    // A new status line (after a 100 Continue): start over.
    ex->response->headers.clear();
    return bytes;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return bytes;
  std::string_view name = line.substr(0, colon);
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  ex->response->headers.emplace_back(std::string(name), std::string(value));
  return bytes;
}

ErrorKind KindOf(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return ErrorKind::kTimeout;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return ErrorKind::kInvalidArgument;
    default:
      return ErrorKind::kUnavailable;
  }
}

}  // namespace

std::optional<std::string> FindHeader(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return v;
  }
  return std::nullopt;
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 &&
        HexDigit(s[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string UrlForLog(std::string_view url) {
  auto cut = url.find_first_of("?#");
  std::string out(url.substr(0, cut));
  // user:password@ in the authority never reaches a log either.
  auto scheme = out.find("://");
  if (scheme != std::string::npos) {
    auto host_start = scheme + 3;
    auto slash = out.find('/', host_start);
    auto at = out.rfind('@', slash == std::string::npos ? out.size() : slash);
    if (at != std::string::npos && at >= host_start) out.erase(host_start, at + 1 - host_start);
  }
  return out;
}

Result<std::string> UrlHost(std::string_view url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), curl_url_cleanup);
  if (!u) return Fail(ErrorKind::kInternal, "cannot create a curl URL handle");
  std::string text(url);
  if (curl_url_set(u.get(), CURLUPART_URL, text.c_str(), 0) != CURLUE_OK) {
    return Fail(ErrorKind::kInvalidArgument, "not an absolute URL: " + UrlForLog(url));
  }
  char* host = nullptr;
  if (curl_url_get(u.get(), CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) {
    return Fail(ErrorKind::kInvalidArgument, "no host in " + UrlForLog(url));
  }
  std::string h(host);
  curl_free(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

bool HostReachableFromElsewhere(std::string_view host) {
  std::string h(host);
  for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (h == "localhost" || h.ends_with(".localhost")) return false;
  unsigned char v4[4];
  if (inet_pton(AF_INET, h.c_str(), v4) == 1) return v4[0] != 127 && (v4[0] | v4[1] | v4[2] | v4[3]) != 0;
  unsigned char v6[16];
  if (inet_pton(AF_INET6, h.c_str(), v6) == 1) {
    static const unsigned char kZero[16] = {};
    static const unsigned char kLoop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(v6, v6 + 16, kZero) || std::equal(v6, v6 + 16, kLoop)) return false;
    if (std::equal(v6, v6 + 12, kMapped)) return v6[12] != 127 && (v6[12] | v6[13] | v6[14] | v6[15]) != 0;
    return true;
  }
  return true;  // a name: its address is not known here
}

CurlHttpClient::CurlHttpClient(std::int64_t max_response_bytes)
    : max_response_bytes_(max_response_bytes) {
  EnsureCurlInit();
}

Result<HttpResponse> CurlHttpClient::Send(const HttpRequest& request) {
  std::string what = request.method + " " + UrlForLog(request.url);
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Fail(ErrorKind::kInternal, what + ": cannot create a curl handle");
  CURL* h = curl.get();

  struct curl_slist* list = nullptr;
  for (const auto& [k, v] : request.headers) {
    list = curl_slist_append(list, (k + ": " + v).c_str());
  }
  if (request.aws_sigv4 && !request.aws_sigv4->session_token.empty()) {
    list = curl_slist_append(
        list, ("X-Amz-Security-Token: " + request.aws_sigv4->session_token).c_str());
  }
  // No "Expect: 100-continue" round trip for larger bodies. Not with SigV4:
  // libcurl 7.88 signs the removed header as if it were sent (bodies under
  // 1 MiB get no Expect header anyway).
  if (!request.aws_sigv4) list = curl_slist_append(list, "Expect:");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(list, curl_slist_free_all);

  HttpResponse response;
  Exchange ex{&response, max_response_bytes_};
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM in a threaded daemon
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout_ms));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<std::int64_t>(request.timeout_ms, 10'000)));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &ex);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &ex);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "trainq/0.1");
  // libcurl opens its sockets inheritable: close-on-exec, so that a child
  // started meanwhile (a run, a provider's script) never holds a connection.
  curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION,
                   +[](void*, curl_socket_t fd, curlsocktype) -> int {
                     ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
                     return CURL_SOCKOPT_OK;
                   });
  if (request.aws_sigv4) {
    const AwsSigV4& sig = *request.aws_sigv4;
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig.provider.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, sig.access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, sig.secret_key.c_str());
  }
  if (!request.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, request.ca_file.c_str());
  // The blobs are copied by libcurl (CURL_BLOB_COPY).
  auto blob = [](const std::string& s) {
    return curl_blob{const_cast<char*>(s.data()), s.size(), CURL_BLOB_COPY};
  };
  if (!request.ca_pem.empty()) {
    curl_blob b = blob(request.ca_pem);
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
  }
  if (!request.client_cert_pem.empty()) {
    curl_blob b = blob(request.client_cert_pem);
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!request.client_key_pem.empty()) {
    curl_blob b = blob(request.client_key_pem);
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  if (request.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }

  CURLcode rc = curl_easy_perform(h);
  if (ex.too_large) {
    return Fail(ErrorKind::kUnavailable, what + ": response larger than " +
                                             std::to_string(max_response_bytes_) + " bytes");
  }
  if (rc != CURLE_OK) {
    std::string detail = error_buffer[0] ? error_buffer : curl_easy_strerror(rc);
    return Fail(KindOf(rc), what + ": " + detail);
  }
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  return response;
}

}  // namespace trainq
