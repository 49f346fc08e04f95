// CurlHttpClient against real HTTP servers on 127.0.0.1.
#include "core/http_client.h"

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/support/http_server.h"

namespace trainq {
namespace {

using testing::TestHttpRequest;
using testing::TestHttpResponse;
using testing::TestHttpServer;

TEST_CASE("http client: sends method, headers and body, returns status, headers and body",
          "[http]") {
  TestHttpServer server([](const TestHttpRequest& r) {
    TestHttpResponse resp;
    resp.status = 201;
    resp.body = "got " + r.method + " " + r.target + " " + r.body;
    resp.headers = {{"X-Answer", "42"}};
    return resp;
  });
  CurlHttpClient client;
  HttpRequest req;
  req.method = "POST";
  req.url = server.url() + "/repos/o/r/statuses/abc?x=1";
  req.headers = {{"Authorization", "Bearer secret-token"}, {"Content-Type", "application/json"}};
  req.body = R"({"state":"pending"})";
  auto resp = client.Send(req);
  REQUIRE(resp);
  CHECK(resp->status == 201);
  CHECK(resp->ok());
  CHECK(resp->body == R"(got POST /repos/o/r/statuses/abc?x=1 {"state":"pending"})");
  CHECK(resp->Header("x-answer") == "42");
  CHECK_FALSE(resp->Header("X-Missing"));

  auto seen = server.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].Header("authorization") == "Bearer secret-token");
  CHECK(seen[0].Header("content-type") == "application/json");
  CHECK(seen[0].Header("expect").empty());
}

TEST_CASE("http client: an HTTP error status is a response, not an Error", "[http]") {
  TestHttpServer server([](const TestHttpRequest&) { return TestHttpResponse{503, "busy", {}}; });
  CurlHttpClient client;
  auto resp = client.Send({"GET", server.url() + "/healthz", {}, "", 5000});
  REQUIRE(resp);
  CHECK(resp->status == 503);
  CHECK_FALSE(resp->ok());
  CHECK(resp->body == "busy");
}

TEST_CASE("http client: a refused connection is kUnavailable and names the URL without its query",
          "[http]") {
  int port = testing::FreeLoopbackPort();
  CurlHttpClient client;
  auto resp = client.Send(
      {"GET", "http://127.0.0.1:" + std::to_string(port) + "/x?token=hunter2", {}, "", 5000});
  REQUIRE_FALSE(resp);
  CHECK(resp.error().kind == ErrorKind::kUnavailable);
  CHECK(resp.error().retryable());
  CHECK(resp.error().message.find("/x") != std::string::npos);
  CHECK(resp.error().message.find("hunter2") == std::string::npos);
}

TEST_CASE("http client: a server that never answers is kTimeout", "[http]") {
  testing::SilentListener silent;
  CurlHttpClient client;
  auto start = std::chrono::steady_clock::now();
  auto resp =
      client.Send({"GET", "http://127.0.0.1:" + std::to_string(silent.port()) + "/", {}, "", 300});
  REQUIRE_FALSE(resp);
  CHECK(resp.error().kind == ErrorKind::kTimeout);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("http client: only http and https URLs", "[http]") {
  CurlHttpClient client;
  auto resp = client.Send({"GET", "file:///etc/passwd", {}, "", 1000});
  REQUIRE_FALSE(resp);
  CHECK(resp.error().kind == ErrorKind::kInvalidArgument);
}

TEST_CASE("http client: a response over the size limit is refused", "[http]") {
  TestHttpServer server(
      [](const TestHttpRequest&) { return TestHttpResponse{200, std::string(10000, 'x'), {}}; });
  CurlHttpClient client(1000);
  auto resp = client.Send({"GET", server.url() + "/big", {}, "", 5000});
  REQUIRE_FALSE(resp);
  CHECK(resp.error().message.find("larger than 1000 bytes") != std::string::npos);
}

TEST_CASE("http client: one client serves several threads", "[http]") {
  TestHttpServer server([](const TestHttpRequest& r) { return TestHttpResponse{200, r.body, {}}; });
  CurlHttpClient client;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        std::string body = std::to_string(t) + "-" + std::to_string(i);
        auto resp = client.Send({"POST", server.url() + "/echo", {}, body, 5000});
        if (resp && resp->body == body) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok == 20);
  CHECK(server.requests().size() == 20);
}

TEST_CASE("http client: UrlEncode and UrlForLog", "[http]") {
  CHECK(UrlEncode("group/sub group/proj") == "group%2Fsub%20group%2Fproj");
  CHECK(UrlEncode("a-b_c.d~e") == "a-b_c.d~e");
  CHECK(UrlForLog("https://user:pw@example.com/x?token=1#f") == "https://example.com/x");
  CHECK(UrlForLog("http://example.com/a@b") == "http://example.com/a@b");
}

}  // namespace
}  // namespace trainq
