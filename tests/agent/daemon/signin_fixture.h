// What the sign-in door tests share (github_login_test.cc, oidc_login_test.cc):
// requests to Server::Handle as a browser at 10.1.2.3 sends them, reading
// replies' headers and redirect addresses, and a fake outside service
// (tests/support/fake_*.py) started on loopback with its --config, its
// requests.jsonl read back.
#pragma once

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/daemon/server_http.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing::signin {

using Query = std::vector<std::pair<std::string, std::string>>;

inline HttpServerRequest Req(std::string method, std::string path, HttpHeaders headers = {},
                             Query query = {}, std::string body = "") {
  HttpServerRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.headers = std::move(headers);
  r.headers.push_back({"Host", "127.0.0.1:8080"});
  r.query = std::move(query);
  r.body = std::move(body);
  r.peer = "10.1.2.3";
  return r;
}

inline std::string Header(const HttpServerReply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

// "name=value" of a Set-Cookie header.
inline std::string CookiePair(const std::string& set_cookie) {
  return set_cookie.substr(0, set_cookie.find(';'));
}

// The session cookie a reply sets ("" when none).
inline std::string SessionCookie(const HttpServerReply& r) {
  for (const auto& [k, v] : r.headers) {
    if (k == "Set-Cookie" && v.starts_with("trainq_dash=")) return CookiePair(v);
  }
  return "";
}

// A refused sign-in: 403, the page says `page_says` and that nothing was
// granted, and no session cookie.
inline void Refused(const HttpServerReply& r, const std::string& page_says) {
  CHECK(r.status == 403);
  CHECK(r.body.find(page_says) != std::string::npos);
  CHECK(r.body.find("Nothing was granted.") != std::string::npos);
  CHECK(SessionCookie(r).empty());
}

inline Query QueryOf(const std::string& url) {
  Query out;
  auto q = url.find('?');
  if (q == std::string::npos) return out;
  for (const auto& kv : Split(url.substr(q + 1), '&')) {
    auto eq = kv.find('=');
    out.emplace_back(UrlDecode(kv.substr(0, eq)),
                     eq == std::string::npos ? "" : UrlDecode(kv.substr(eq + 1)));
  }
  return out;
}

inline std::string Get(const Query& q, const std::string& k) {
  for (const auto& [a, b] : q) {
    if (a == k) return b;
  }
  return "";
}

// tests/support/SCRIPT --config DIR/fake.json (`config`) on a free loopback
// port, stopped at the end of the test.
struct FakeService {
  PosixProcessRunner runner;
  int pid = 0;
  std::string url;  // http://127.0.0.1:PORT
  std::string dir;
  CurlHttpClient http;

  FakeService(const TempDir& tmp, const std::string& script, const nlohmann::json& config)
      : dir(tmp.path().string()) {
    REQUIRE(WriteFile(tmp / "fake.json", config.dump()));
    // Debian's python3: python3-jwt and python3-cryptography (fake_oidc.py)
    // are not seen by a pyenv or venv python3 that may come first on PATH.
    std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    auto p = runner.Spawn({{python, std::string(TRAINQ_SOURCE_DIR) + "/tests/support/" + script,
                            "--config", tmp / "fake.json", "--dir", dir, "--port-file",
                            tmp / "port"},
                           {},
                           dir,
                           tmp / (script + ".log")});
    REQUIRE(p);
    pid = *p;
    std::string port;
    REQUIRE(WaitFor(
        [&] {
          if (auto t = ReadFile(tmp / "port")) port = std::string(Trim(*t));
          return !port.empty();
        },
        std::chrono::seconds(20)));
    url = "http://127.0.0.1:" + port;
  }
  ~FakeService() {
    if (pid > 0) {
      runner.KillGroup(pid, SIGTERM);
      runner.Wait(pid);
    }
  }
  // POST url+path with a JSON body (the fakes' /_fake/... controls).
  nlohmann::json Post(const std::string& path, const nlohmann::json& body) {
    HttpRequest r;
    r.method = "POST";
    r.url = url + path;
    r.headers = {{"Content-Type", "application/json"}};
    r.body = body.dump();
    auto resp = http.Send(r).value();
    REQUIRE(resp.status == 200);
    return nlohmann::json::parse(resp.body);
  }
  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> out;
    for (const auto& line : Split(ReadFile(dir + "/requests.jsonl").value_or(""), '\n')) {
      if (!Trim(line).empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }
  int Count(const std::string& path) const {
    int n = 0;
    for (const auto& r : Requests()) n += r["path"] == path;
    return n;
  }
};

}  // namespace trainq::testing::signin
