// The HTTP server: routes without sockets, then the real listener on
// loopback.
#include "agent/daemon/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/daemon/server_http.h"
#include "agent/daemon/worker_api.h"
#include "agent/results/status.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/webhook.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/http_server.h"
#include "tests/support/log_capture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

constexpr const char* kSecret = "loopback-secret";

constexpr const char* kReadToken = "server-test-read-token";
HttpHeaders ReadAuth() { return {{"Authorization", std::string("Bearer ") + kReadToken}}; }

struct World {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  ServerConfig config;
  std::unique_ptr<Server> server;

  World() {
    REQUIRE(WriteFile(tmp / "secret", kSecret));
    REQUIRE(WriteFile(tmp / "read-token", kReadToken));
    auto c = ParseServerConfig("repositories:\n  - url: https://github.com/acme/model.git\n"
                               "    forge: github\n    secret: {file: " +
                                   (tmp / "secret") + "}\nread_token: {file: " +
                                   (tmp / "read-token") + "}\n",
                               "server.yaml");
    REQUIRE(c);
    config = *c;
    {
      auto store = Store::Open(db).value();
      BatchSpec spec;
      spec.experiment = "lstm";
      spec.command = "true";
      spec.repeats = 3;
      REQUIRE(store.runs().Submit("/srv/model", {std::string(40, 'c'), "", "subject", "me", 0}, {spec},
                           clock.Now()));
    }
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }

  static std::string PushBody(const std::string& after) {
    return json{{"ref", "refs/heads/main"},
                {"before", std::string(40, '1')},
                {"after", after},
                {"repository", {{"clone_url", "https://github.com/acme/model.git"}}}}
        .dump();
  }
  static HttpHeaders Signed(const std::string& body, const std::string& delivery) {
    return {{"X-GitHub-Event", "push"},
            {"X-GitHub-Delivery", delivery},
            {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(kSecret, body)},
            {"Content-Type", "application/json"}};
  }
};

TEST_CASE("server: routes without sockets", "[server]") {
  World w;
  auto health = w.server->Handle({"GET", "/healthz", {}, "", false});
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");

  // The status document and the counters show runs: the read token first.
  for (const char* route : {"/api/v1/status", "/metrics"}) {
    CHECK(w.server->Handle({"GET", route, {}, "", false}).status == 401);
    CHECK(w.server->Handle({"GET", route, {{"Authorization", "Bearer wrong"}}, "", false}).status ==
          401);
  }
  auto status = w.server->Handle({"GET", "/api/v1/status", ReadAuth(), "", false});
  REQUIRE(status.status == 200);
  CHECK(status.content_type == "application/json");
  auto store = Store::Open(w.db).value();
  CHECK(json::parse(status.body) == StatusJson(store, w.db, w.clock.Now()).value());
  CHECK(json::parse(status.body)["counts"]["queued"] == 3);

  CHECK(w.server->Handle({"GET", "/hooks/github", {}, "", false}).status == 405);
  CHECK(w.server->Handle({"POST", "/api/v1/status", {}, "", false}).status == 405);
  CHECK(w.server->Handle({"GET", "/nope", {}, "", false}).status == 404);
  CHECK(w.server->Handle({"POST", "/hooks/bitbucket", {}, "", false}).status == 405);

  std::string body = World::PushBody(std::string(40, 'd'));
  bool woken = false;
  w.server->set_on_push([&] { woken = true; });
  auto hook = w.server->Handle({"POST", "/hooks/github/", World::Signed(body, "x1"), body, false});
  CHECK(hook.status == 202);
  CHECK(woken);
  CHECK(w.server->Handle({"POST", "/hooks/github", World::Signed(body, "x1"), body, false})
            .status == 200);  // duplicate
  CHECK(w.server->Handle({"POST", "/hooks/github", {}, body, false}).status == 401);
  CHECK(w.server->Handle({"POST", "/hooks/github", {}, "", true}).status == 413);

  auto metrics = w.server->Handle({"GET", "/metrics", ReadAuth(), "", false});
  CHECK(metrics.status == 200);
  CHECK(metrics.content_type.starts_with("text/plain; version=0.0.4"));
  const std::string& m = metrics.body;
  INFO(m);
  for (const char* line :
       {"trainq_runs{state=\"queued\"} 3", "trainq_runs{state=\"running\"} 0",
        "trainq_runs_finished_total{outcome=\"succeeded\"} 0", "trainq_pushes{state=\"pending\"} 1",
        "trainq_webhook_deliveries_total{forge=\"github\",result=\"accepted\"} 1",
        "trainq_webhook_deliveries_total{forge=\"github\",result=\"duplicate\"} 1",
        "trainq_webhook_deliveries_total{forge=\"github\",result=\"unauthorized\"} 1",
        "trainq_webhook_deliveries_total{forge=\"github\",result=\"too_large\"} 1",
        "trainq_webhook_receive_to_stored_seconds_count 1",
        "# TYPE trainq_webhook_receive_to_stored_seconds histogram"}) {
    CHECK(m.find(line) != std::string::npos);
  }
}

TEST_CASE("server: listen addresses", "[server]") {
  auto a = ParseListenAddress("127.0.0.1:8080");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  CHECK(a->loopback());
  CHECK(ParseListenAddress("[::1]:9000").value().host == "::1");
  CHECK(ParseListenAddress("localhost:1").value().loopback());
  CHECK_FALSE(ParseListenAddress("0.0.0.0:80").value().loopback());
  for (const char* bad : {"8080", ":8080", "host:", "host:http", "host:70000", "host:0"}) {
    INFO(bad);
    auto r = ParseListenAddress(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("--listen: "));
  }
}

TEST_CASE("server: real HTTP on loopback, several clients at once", "[server]") {
  World w;
  int port = testing::FreeLoopbackPort();
  auto listener = HttpListener::Start({"127.0.0.1", port}, kMaxWebhookBodyBytes,
                                      [&](const HttpServerRequest& r) { return w.server->Handle(r); });
  REQUIRE(listener);
  std::string base = "http://127.0.0.1:" + std::to_string(port);
  CurlHttpClient http;

  auto health = http.Send({"GET", base + "/healthz", {}, "", 5000});
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(health->body == "ok\n");

  auto status = http.Send({"GET", base + "/api/v1/status", ReadAuth(), "", 5000});
  REQUIRE(status);
  CHECK(json::parse(status->body)["counts"]["queued"] == 3);

  std::atomic<int> accepted{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      CurlHttpClient c;
      for (int i = 0; i < 10; ++i) {
        char after[41];
        snprintf(after, sizeof after, "%020d%020d", t + 1, i);  // never all zeros
        std::string body = World::PushBody(after);
        auto r = c.Send({"POST", base + "/hooks/github",
                         World::Signed(body, "c" + std::to_string(t) + "-" + std::to_string(i)),
                         body, 5000});
        if (r && r->status == 202) {
          ++accepted;
        } else {
          std::lock_guard<std::mutex> lock(errors_mu);
          errors.push_back(r ? std::to_string(r->status) + " " + r->body : r.error().message);
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  for (const auto& e : errors) UNSCOPED_INFO(e);
  CHECK(accepted == 40);
  auto store = Store::Open(w.db).value();
  CHECK(store.pushes().RecentPushes(100).value().size() == 40);

  // Forged over the wire: 401 and nothing stored.
  std::string body = World::PushBody(std::string(40, 'e'));
  auto forged = http.Send({"POST", base + "/hooks/github",
                           {{"X-GitHub-Event", "push"}, {"X-Hub-Signature-256", "sha256=00"}},
                           body, 5000});
  REQUIRE(forged);
  CHECK(forged->status == 401);
  CHECK(store.pushes().RecentPushes(100).value().size() == 40);

  // A body over 25 MB is refused from its Content-Length.
  std::string big(kMaxWebhookBodyBytes + 10, 'x');
  auto too_big = http.Send({"POST", base + "/hooks/github",
                            {{"X-GitHub-Event", "push"},
                             {"X-Hub-Signature-256", "sha256=" + std::string(64, '0')}},
                            big, 20'000});
  if (too_big) CHECK(too_big->status == 413);  // or the server closed while we sent: also fine

  listener.value()->Stop();
  auto after_stop = http.Send({"GET", base + "/healthz", {}, "", 2000});
  CHECK_FALSE(after_stop);
}

TEST_CASE("server: a port in use is an error naming --listen", "[server]") {
  testing::SilentListener taken;
  auto listener =
      HttpListener::Start({"127.0.0.1", taken.port()}, 1024,
                          [](const HttpServerRequest&) { return HttpServerReply{}; });
  REQUIRE_FALSE(listener);
  CHECK(listener.error().message.starts_with("--listen 127.0.0.1:" +
                                             std::to_string(taken.port())));
}


// ---- request limits (issue 16): decided from the headers, before any body ---

// A raw client: sends `head` (and `body_prefix`), then reads what the server
// answers until it closes or `deadline` passes. The rest of a declared body is
// never sent, so an answer proves that the server did not wait for it.
struct RawClient {
  int fd = -1;
  // `from`: the source address (any of 127.0.0.0/8 reaches a loopback listener).
  explicit RawClient(int port, const char* from = nullptr) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      REQUIRE(::inet_pton(AF_INET, from, &src.sin_addr) == 1);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~RawClient() { ::close(fd); }
  void Send(const std::string& s) {
    REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
  }
  // Reads until the status line and headers are in (or the connection ends).
  std::string ReadReply(std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    std::string out;
    auto until = std::chrono::steady_clock::now() + deadline;
    while (out.find("\r\n\r\n") == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      until - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

std::string Post(const std::string& path, std::size_t length, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(length) +
         "\r\n" + extra + "\r\n";
}

// A GitHub signature header of the right form (64 hex digits) that no
// secret verifies: what an attacker who knows the format sends.
std::string WellFormedSignature() { return "X-Hub-Signature-256: sha256=" + std::string(64, '0') + "\r\n"; }

struct LimitWorld {
  World w;
  int port = testing::FreeLoopbackPort();
  std::unique_ptr<HttpListener> listener;
  explicit LimitWorld(ListenerLimits limits = {}) {
    auto l = HttpListener::Start(
        {"127.0.0.1", port}, kMaxWebhookBodyBytes,
        [this](const HttpServerRequest& r) { return w.server->Handle(r); },
        [this](const HttpServerRequest& h) { return w.server->Admit(h); }, limits);
    REQUIRE(l);
    listener = std::move(*l);
  }
};

TEST_CASE("listener: a webhook declaring more than 25 MB is refused 413 before its body is sent",
          "[server][limits]") {
  LimitWorld lw;
  RawClient c(lw.port);
  c.Send(Post("/hooks/github", std::size_t{10} << 30,
              "X-GitHub-Event: push\r\n" + WellFormedSignature()) +
         "{\"a\":");
  auto reply = c.ReadReply();
  CHECK(reply.starts_with("HTTP/1.1 413"));
}

TEST_CASE("listener: the worker API refuses a request without a valid token from its headers, "
          "and bounds bodies far below a webhook's",
          "[server][limits]") {
  LimitWorld lw;
  {
    RawClient c(lw.port);
    c.Send(Post("/api/v1/runs/1/log", 20u << 20));  // no token, 20 MB declared, none sent
    CHECK(c.ReadReply().starts_with("HTTP/1.1 401"));
  }
  {
    RawClient c(lw.port);
    c.Send(Post("/api/v1/runs/1/log", 20u << 20, "Authorization: Bearer nope\r\n"));
    CHECK(c.ReadReply().starts_with("HTTP/1.1 401"));
  }
  HttpServerRequest head;
  head.method = "POST";
  head.path = "/hooks/github";
  // A webhook without a signature that a secret could verify: refused unread.
  for (const char* sig : {"", "sha256=00", "sha1=0000"}) {
    head.headers = {{"X-Hub-Signature-256", sig}};
    auto unsigned_hook = lw.w.server->Admit(head);
    REQUIRE(unsigned_hook.refuse);
    CHECK(unsigned_hook.refuse->status == 401);
    CHECK(unsigned_hook.max_body_bytes == 0);
  }
  // A well-formed signature: up to 25 MB, read as an anonymous body (the
  // HMAC covers the body, so it is not trusted before it is read).
  head.headers = {{"X-Hub-Signature-256", "sha256=" + std::string(64, 'a')}};
  CHECK(lw.w.server->Admit(head).max_body_bytes == kMaxWebhookBodyBytes);
  CHECK_FALSE(lw.w.server->Admit(head).trusted);
  head.headers.clear();
  head.path = "/api/v1/runs/1/log";
  auto refused = lw.w.server->Admit(head);
  REQUIRE(refused.refuse);
  CHECK(refused.refuse->status == 401);
  head.path = "/healthz";
  CHECK(lw.w.server->Admit(head).max_body_bytes == Server::kMaxOtherBodyBytes);
  CHECK(Server::kMaxWorkerBodyBytes < kMaxWebhookBodyBytes / 4);
  {
    RawClient c(lw.port);
    c.Send(Post("/metrics", 1u << 20));  // a read route takes no large body
    CHECK(c.ReadReply().starts_with("HTTP/1.1 4"));
  }
}

TEST_CASE("listener: a chunked body is refused 411 without being read", "[server][limits]") {
  LimitWorld lw;
  RawClient c(lw.port);
  c.Send("POST /hooks/github HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" +
         WellFormedSignature() + "\r\n100000\r\n");
  CHECK(c.ReadReply().starts_with("HTTP/1.1 411"));
}

TEST_CASE("listener: keep-alive requests on one connection, and Expect: 100-continue",
          "[server][limits]") {
  LimitWorld lw;
  RawClient c(lw.port);
  c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  auto a = c.ReadReply();
  CHECK(a.starts_with("HTTP/1.1 200"));
  c.Send(Post("/hooks/github", 2,
              "X-GitHub-Event: push\r\nExpect: 100-continue\r\n" + WellFormedSignature()));
  CHECK(c.ReadReply().find("HTTP/1.1 100 Continue") != std::string::npos);
}


// ---- slow and many clients (issue 25): whole-request deadlines, eviction ----

// True when the server closed `fd` (EOF or a reset) within `within`.
bool ClosedWithin(int fd, std::chrono::milliseconds within) {
  auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return true;  // EOF or reset (the answer, if any, is skipped)
  }
}

// A listener with its own routes: 200 for anything; a request whose headers
// carry "Authorization: Bearer good" is trusted, as a worker's is.
struct PlainListener {
  int port = testing::FreeLoopbackPort();
  std::unique_ptr<HttpListener> listener;
  explicit PlainListener(ListenerLimits limits) {
    auto l = HttpListener::Start(
        {"127.0.0.1", port}, 1 << 20,
        [](const HttpServerRequest&) { return HttpServerReply{200, "text/plain", "ok\n"}; },
        [](const HttpServerRequest& h) {
          Admission a;
          a.max_body_bytes = 1 << 20;
          for (const auto& [k, v] : h.headers) {
            if (k == "Authorization" && v == "Bearer good") a.trusted = true;
          }
          return a;
        },
        limits);
    REQUIRE(l);
    listener = std::move(*l);
  }
};

TEST_CASE("listener: a header trickled a byte at a time is cut at its deadline, not kept alive "
          "by each byte",
          "[server][limits][slow]") {
  ListenerLimits limits;
  limits.header_timeout_ms = 1000;
  PlainListener pl(limits);
  RawClient c(pl.port);
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  // A byte every 200 ms: a per-read limit would never fire.
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaa";
  for (std::size_t i = 0; i < head.size() && !closed; ++i) {
    if (::send(c.fd, head.data() + i, 1, MSG_NOSIGNAL) != 1) break;
    closed = ClosedWithin(c.fd, std::chrono::milliseconds(200));
  }
  if (!closed) closed = ClosedWithin(c.fd, std::chrono::seconds(3));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(closed);
  CHECK(s >= 0.9);
  CHECK(s < 3.0);
}

TEST_CASE("listener: a body trickled a byte at a time is cut at its deadline",
          "[server][limits][slow]") {
  ListenerLimits limits;
  limits.body_timeout_ms = 800;
  limits.min_rate = 1 << 20;  // 100 bytes take no time at that rate: 800 ms in all
  CHECK(TransferDeadlineMs(limits, 100) == 800);
  CHECK(TransferDeadlineMs(limits, 3u << 20) == 3800);
  PlainListener pl(limits);
  RawClient c(pl.port);
  c.Send(Post("/hooks/x", 100));
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    if (::send(c.fd, "a", 1, MSG_NOSIGNAL) != 1) break;
    closed = ClosedWithin(c.fd, std::chrono::milliseconds(150));
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(closed);
  CHECK(s < 3.0);
}

TEST_CASE("listener: an idle keep-alive connection is closed after idle_timeout",
          "[server][limits][slow]") {
  ListenerLimits limits;
  limits.idle_timeout_ms = 500;
  PlainListener pl(limits);
  RawClient c(pl.port);
  c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.ReadReply().starts_with("HTTP/1.1 200"));
  auto start = std::chrono::steady_clock::now();
  CHECK(ClosedWithin(c.fd, std::chrono::seconds(5)));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s >= 0.4);
  CHECK(s < 3.0);
}

TEST_CASE("listener: slow anonymous connections are evicted, oldest first, so /healthz and a "
          "trusted request are served past the caps",
          "[server][limits][slow]") {
  ListenerLimits limits;
  limits.max_connections = 8;
  limits.max_per_address = 4;
  PlainListener pl(limits);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawClient>(pl.port));
    slow.back()->Send("G");  // a header that never ends
  }
  {
    RawClient h(pl.port);
    h.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(h.ReadReply(std::chrono::seconds(5)).starts_with("HTTP/1.1 200"));
  }
  // Only the newest slow ones of this address are still open (at most 4).
  int open = 0;
  for (auto& c : slow) open += ClosedWithin(c->fd, std::chrono::milliseconds(50)) ? 0 : 1;
  CHECK(open <= 4);
  CHECK(open >= 1);
  // A trusted request in the middle of its body is never evicted by newcomers.
  RawClient worker(pl.port);
  worker.Send(Post("/api/v1/runs/1/log", 10,
                   "Authorization: Bearer good\r\nExpect: 100-continue\r\n"));
  CHECK(worker.ReadReply().starts_with("HTTP/1.1 100 Continue"));  // admitted: trusted
  std::vector<std::unique_ptr<RawClient>> more;
  for (int i = 0; i < 12; ++i) {
    more.push_back(std::make_unique<RawClient>(pl.port));
    more.back()->Send("G");
  }
  worker.Send("0123456789");
  CHECK(worker.ReadReply(std::chrono::seconds(5)).starts_with("HTTP/1.1 200"));
}


// ---- request bodies under a budget of their own (issue 36, F2) --------------

constexpr const char* kPoolToken = "budget-pool-token-0123456789";

// serve's Server behind the real listener with `limits`: a GitHub repository
// (kSecret), the read token, and a pool whose token makes a worker.
struct BudgetWorld {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::unique_ptr<HttpListener> listener;
  int port = testing::FreeLoopbackPort();
  std::string base = "http://127.0.0.1:" + std::to_string(port);

  explicit BudgetWorld(ListenerLimits limits) {
    REQUIRE(WriteFile(tmp / "secret", kSecret));
    REQUIRE(WriteFile(tmp / "read-token", kReadToken));
    REQUIRE(WriteFile(tmp / "pool-token", kPoolToken));
    config = ParseServerConfig("repositories:\n  - url: https://github.com/acme/model.git\n"
                               "    forge: github\n    secret: {file: " +
                                   (tmp / "secret") + "}\nread_token: {file: " +
                                   (tmp / "read-token") + "}\npools:\n  - name: cpu\n"
                                   "    token: {file: " + (tmp / "pool-token") + "}\n",
                               "server.yaml")
                 .value();
    {
      auto store = Store::Open(db).value();
      REQUIRE(EnsurePoolTokens(store, config, tmp / "data", clock.Now()));
    }
    ServerOptions o;
    o.data_dir = tmp / "data";
    server = std::make_unique<Server>(config, db, clock, o);
    REQUIRE(server->Open());
    auto l = HttpListener::Start(
        {"127.0.0.1", port}, kMaxWebhookBodyBytes,
        [this](const HttpServerRequest& r) { return server->Handle(r); },
        [this](const HttpServerRequest& h) { return server->Admit(h); }, limits);
    REQUIRE(l);
    listener = std::move(*l);
    server->set_listener(listener.get());
  }
  ~BudgetWorld() {
    server->set_listener(nullptr);
    server->StopWaiting();
    listener->Stop();
  }
  // A worker registers (a request with a JSON body, from its token).
  HttpResponse Register(CurlHttpClient& http, const std::string& name) {
    json req = {{"name", name}, {"hostname", "node1"}, {"pid", 1},  {"slots", 1},
                {"cpus", 2},    {"memory_mb", 1000},   {"gpus", json::array()}, {"version", "t"}};
    auto r = http.Send({"POST",
                        base + "/api/v1/workers/register",
                        {{"Authorization", std::string("Bearer ") + kPoolToken},
                         {"Content-Type", "application/json"}},
                        req.dump(), 5000});
    REQUIRE(r);
    return *r;
  }
};

// One anonymous webhook that declares `declared` bytes and sends `first`.
std::string HookHead(std::size_t declared) {
  return Post("/hooks/github", declared,
              "X-GitHub-Event: push\r\nContent-Type: application/json\r\n" +
                  WellFormedSignature());
}

TEST_CASE("listener: six anonymous webhook bodies trickling a byte at a time no longer freeze "
          "the worker API (issue 36 F2, the probe's t5c hold.py)",
          "[server][limits][budget][slow]") {
  ListenerLimits limits;  // serve's budgets: 128 MB trusted, 64 MB anonymous
  limits.anonymous_grace_ms = 1500;
  BudgetWorld bw(limits);
  CurlHttpClient http;
  // hold.py: 5 x 25 MB + 3 MB declared, one body byte sent, a byte every
  // 500 ms after; each connection serve ends is opened again at once.
  const std::vector<std::size_t> sizes = {25u << 20, 25u << 20, 25u << 20, 25u << 20, 25u << 20,
                                          3u << 20};
  struct Held {
    std::unique_ptr<RawClient> c;
    std::size_t size;
    std::chrono::steady_clock::time_point opened;
  };
  std::vector<Held> held;
  for (auto n : sizes) {
    held.push_back({std::make_unique<RawClient>(bw.port), n, std::chrono::steady_clock::now()});
    held.back().c->Send(HookHead(n) + "{");
  }
  int registered = 0, refused = 0, healthy = 0, reopened = 0;
  std::size_t most_anonymous = 0;
  double longest_held_s = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    for (auto& h : held) {
      if (ClosedWithin(h.c->fd, std::chrono::milliseconds(1)) ||
          ::send(h.c->fd, " ", 1, MSG_NOSIGNAL) != 1) {
        longest_held_s = std::max(
            longest_held_s,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - h.opened).count());
        h.c = std::make_unique<RawClient>(bw.port);
        h.c->Send(HookHead(h.size) + "{");
        h.opened = std::chrono::steady_clock::now();
        ++reopened;
      }
    }
    auto r = bw.Register(http, "box-" + std::to_string(i));
    (r.status == 200 ? registered : refused) += 1;
    auto hz = http.Send({"GET", bw.base + "/healthz", {}, "", 3000});
    if (hz && hz->status == 200 && hz->body == "ok\n") ++healthy;
    most_anonymous = std::max(most_anonymous, bw.listener->Stats().anonymous_body_bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the trickle's pace
  }
  INFO("registered " << registered << ", refused " << refused << ", healthy " << healthy
                     << ", reopened " << reopened << ", longest held " << longest_held_s << " s");
  CHECK(registered >= 10);
  CHECK(refused == 0);
  CHECK(healthy == registered);
  // Counted as received, not as declared: 128 MB declared, a few bytes held.
  CHECK(most_anonymous < 1024);
  // A trickle is cut at its pace's deadline (1.5 s here), not after 430 s.
  CHECK(reopened >= 6);
  CHECK(longest_held_s < 4.0);
  CHECK(bw.listener->Stats().anonymous_cut >= 6);
  CHECK(bw.listener->Stats().trusted_refusals == 0);
}

TEST_CASE("listener: anonymous bodies share a budget of which one address holds a part, and "
          "trusted bodies have their own",
          "[server][limits][budget]") {
  ListenerLimits limits;
  limits.max_anonymous_body_bytes = 1'000'000;
  limits.max_anonymous_per_address = 600'000;
  limits.max_trusted_body_bytes = 200'000;
  limits.anonymous_grace_ms = 20'000;  // no pace cut within this test
  BudgetWorld bw(limits);
  CurlHttpClient http;
  // A: 127.0.0.1 holds 500 kB of an 800 kB body.
  RawClient a(bw.port);
  a.Send(HookHead(800'000) + std::string(500'000, ' '));
  REQUIRE(testing::WaitFor([&] { return bw.listener->Stats().anonymous_body_bytes == 500'000; },
                           std::chrono::seconds(10)));
  // B: the same address, 200 kB more: over its address's 600 kB, 503.
  {
    RawClient b(bw.port);
    b.Send(HookHead(200'000));
    std::string body(200'000, ' ');
    ::send(b.fd, body.data(), body.size(), MSG_NOSIGNAL);
    CHECK(b.ReadReply().starts_with("HTTP/1.1 503"));
  }
  // C: another address is not held back by A's share: read whole, answered
  // by the handler (401: the signature is wrong).
  {
    RawClient c(bw.port, "127.0.0.2");
    c.Send(HookHead(400'000) + std::string(400'000, ' '));
    CHECK(c.ReadReply().starts_with("HTTP/1.1 401"));
  }
  // A worker's request draws from the trusted budget, untouched by A.
  CHECK(bw.Register(http, "box").status == 200);
  auto hz = http.Send({"GET", bw.base + "/healthz", {}, "", 3000});
  REQUIRE(hz);
  CHECK(hz->status == 200);
  CHECK(bw.listener->Stats().anonymous_refusals == 1);

  // Trusted requests over their own budget: 503, and /healthz says degraded.
  std::string big = json{{"name", std::string(300'000, 'x')}}.dump();
  auto over = http.Send({"POST", bw.base + "/api/v1/workers/register",
                         {{"Authorization", std::string("Bearer ") + kPoolToken}}, big, 5000});
  if (over) CHECK(over->status == 503);  // or closed while we sent: also a refusal
  CHECK(bw.listener->Stats().trusted_refusals == 1);
  hz = http.Send({"GET", bw.base + "/healthz", {}, "", 3000});
  REQUIRE(hz);
  CHECK(hz->status == 503);
  CHECK(hz->body.starts_with("degraded: requests of workers or token holders were refused"));
  auto metrics = http.Send({"GET", bw.base + "/metrics", ReadAuth(), "", 3000});
  REQUIRE(metrics);
  CHECK(metrics->body.find("trainq_http_body_refusals_total{caller=\"trusted\"} 1") !=
        std::string::npos);
  CHECK(metrics->body.find("trainq_http_body_bytes{caller=\"anonymous\"} 500000") !=
        std::string::npos);
  // The read token is trusted too: its requests are not anonymous ones.
  HttpServerRequest head;
  head.method = "GET";
  head.path = "/api/v1/status";
  head.headers = ReadAuth();
  CHECK(bw.server->Admit(head).trusted);
  head.headers.clear();
  CHECK_FALSE(bw.server->Admit(head).trusted);
}

TEST_CASE("listener: a path with a control character is refused 400 before any route, so CR/LF "
          "cannot split a reply or forge a log line (issue 36 F7 F8)",
          "[server][limits][dashboard]") {
  ListenerLimits limits;
  BudgetWorld bw(limits);
  testing::LogCapture log;
  // F7: the login redirect's Location came from the decoded path.
  {
    RawClient c(bw.port);
    c.Send("GET /experiment/%0d%0aSet-Cookie:%20evil=1?token=" + std::string(kReadToken) +
           " HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string reply = c.ReadReply();
    CHECK(reply.starts_with("HTTP/1.1 400"));
    CHECK(reply.find("evil") == std::string::npos);
    CHECK(reply.find("Set-Cookie") == std::string::npos);
  }
  // F8: a wrong token's warning logged the decoded path.
  {
    RawClient c(bw.port);
    c.Send("GET /experiment/x%0a2099-01-01T00:00:00.000%20info%20dashboard:%20admin%20session%20"
           "deadbeef%20cancelled%20batch%201?token=wrong HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(c.ReadReply().starts_with("HTTP/1.1 400"));
  }
  for (const char* bad : {"%00", "%09", "%1b", "%7f", "%0D"}) {
    RawClient c(bw.port);
    c.Send(std::string("GET /run/1") + bad + " HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(c.ReadReply().starts_with("HTTP/1.1 400"));
  }
  CHECK(log.text().find("deadbeef") == std::string::npos);
  CHECK(log.text().find("evil") == std::string::npos);
  // A path without one is served as before.
  CurlHttpClient http;
  auto ok = http.Send({"GET", bw.base + "/experiment/x%20y", {}, "", 3000});
  REQUIRE(ok);
  CHECK(ok->status == 401);  // the sign-in page: not signed in
}

}  // namespace
}  // namespace trainq
