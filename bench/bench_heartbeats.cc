// Heartbeats of many workers over the worker protocol against a real
// `trainq serve` on loopback, with signed push webhooks arriving meanwhile
// (issue 30: 10,000 workers beating every 10 s = 1,000 requests/s).
//
// Registers --workers workers (POST /api/v1/workers/register with the pool's
// token), leases each one run (POST /api/v1/workers/{id}/lease), then sends
// heartbeats (POST /api/v1/runs/{id}/heartbeat) at a fixed --rate, each to
// the next worker's run, from --clients threads, and webhooks at
// --webhook-rate. Latency is from the moment a request was due to its
// answer. Prints `figure name=value` lines (bench/scale.sh) and serve's RSS
// sampled every second.
//
//   bench_heartbeats [--workers 10000] [--rate 1000] [--seconds 30] [--webhook-rate 20]
//                    [--clients 32] [--trainq PATH] [--dir /tmp] [--rss-every 0]
//                    [--db postgres://USER@HOST/DB]
// --db: the store serve uses (default: DIR/trainq.db); a postgres:// URL
// names an empty database (bench/README.md, "PostgreSQL and SQLite").
// --rss-every S: also print `rss T_S MB` every S seconds as it goes (a long
// run's curve survives the run being stopped early).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/triggers/forge.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

namespace fs = std::filesystem;
using namespace trainq;
using Steady = std::chrono::steady_clock;
using nlohmann::json;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_heartbeats: %s\n", what.c_str());
  std::exit(1);
}

void Shell(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) Die("failed: " + cmd);
}

long RssKb(int pid) {
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/status");
  if (!text) return -1;
  auto pos = text->find("VmRSS:");
  if (pos == std::string::npos) return -1;
  return std::strtol(text->c_str() + pos + 6, nullptr, 10);
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die("cannot find a free port");
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void Figure(const std::string& name, double value) {
  std::printf("figure %s=%.6g\n", name.c_str(), value);
  std::fflush(stdout);
}

// Runs `n` jobs over `clients` threads, job i not before due(i); returns each
// job's latency from its due time (ms), -1 for a failed one.
template <typename Job>
std::vector<double> OpenLoop(int n, int clients, const std::function<Steady::time_point(int)>& due,
                             Job&& job) {
  std::vector<double> latency(n, -1);
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int c = 0; c < clients; ++c) {
    pool.emplace_back([&] {
      CurlHttpClient client;
      while (true) {
        int i = next++;
        if (i >= n) return;
        auto at = due(i);
        std::this_thread::sleep_until(at);
        bool ok = job(client, i);
        latency[i] = ok ? std::chrono::duration<double, std::milli>(Steady::now() - at).count()
                        : -1;
      }
    });
  }
  for (auto& t : pool) t.join();
  return latency;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 10'000, rate = 1'000, seconds = 30, webhook_rate = 20, clients = 32;
  int rss_every = 0;
  std::string trainq;
  std::string db;
  std::string base = fs::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--workers") workers = std::stoi(v);
    else if (a == "--rate") rate = std::stoi(v);
    else if (a == "--seconds") seconds = std::stoi(v);
    else if (a == "--webhook-rate") webhook_rate = std::stoi(v);
    else if (a == "--clients") clients = std::stoi(v);
    else if (a == "--trainq") trainq = v;
    else if (a == "--rss-every") rss_every = std::stoi(v);
    else if (a == "--dir") base = v;
    else if (a == "--db")
      db = v;
    else Die("unknown option " + a);
  }
  if (trainq.empty()) {
    trainq = (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "agent/trainq")
                 .string();
  }
  trainq = fs::absolute(trainq).string();  // serve starts in its own directory
  std::string dir = base + "/bench-heartbeats-" + std::to_string(getpid());
  fs::create_directories(dir);
  if (db.empty()) db = dir + "/trainq.db";
  const std::string secret = "bench-secret", token = "bench-pool-token-0123456789";
  if (!WriteFile(dir + "/secret", secret) || !WriteFile(dir + "/cpu.token", token)) {
    Die("cannot write the secrets");
  }
  fs::permissions(dir + "/cpu.token", fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(dir + "/secret", fs::perms::owner_read | fs::perms::owner_write);
  // A repository the webhooks name (one push, delivered again and again).
  std::string git = "GIT_CONFIG_GLOBAL=/dev/null git -c user.name=b -c user.email=b@b "
                    "-c init.defaultBranch=main -C " + dir + "/origin";
  fs::create_directories(dir + "/origin");
  Shell(git + " init -q");
  (void)WriteFile(dir + "/origin/trainq.yaml",
                  "version: 1\nexperiments:\n  a:\n    command: 'true'\n    repeats: 1\n");
  Shell(git + " add -A && " + git + " commit -q -m base");
  (void)WriteFile(dir + "/origin/x", "1\n");
  Shell(git + " add -A && " + git + " commit -q -m two");
  auto rev = [&](const std::string& r) {
    FILE* p = popen((git + " rev-parse " + r).c_str(), "r");
    char buf[64] = {0};
    if (!p || !fgets(buf, sizeof buf, p)) Die("rev-parse");
    pclose(p);
    return std::string(Trim(buf));
  };
  std::string before = rev("HEAD~1"), after = rev("HEAD");
  std::string url = "file://" + dir + "/origin";
  // A pool of hand-started workers (max 0: the fleet boots nothing). No
  // webhook rate limit: every webhook is a push to store, as in the first
  // figures (the default of 60 a minute answers most of them 429).
  (void)WriteFile(dir + "/server.yaml",
                  "repositories:\n  - url: " + url + "\n    forge: github\n    secret: {file: " +
                      dir + "/secret}\n    webhook_rate_limit: 0\npools:\n  - name: cpu\n    max: 0\n    slots: 1\n"
                      "    lost_after: 0\n    token: {file: " + dir + "/cpu.token}\n");
  // The runs the workers will hold, queued before serve starts.
  {
    auto store = Store::Open(db);
    if (!store) Die(store.error().message);
    BatchSpec b;
    b.experiment = "held";
    b.command = "true";
    b.repeats = workers;
    b.pool = "cpu";
    CommitInfo c;
    c.sha = std::string(40, 'a');
    if (auto r = store->runs().Submit("/bench/held", c, {b}, SystemClock::Get().Now()); !r) {
      Die(r.error().message);
    }
  }
  int port = FreePort();
  std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  PosixProcessRunner runner;
  auto pid = runner.Spawn({{trainq, "--db", db, "serve", "--config", dir + "/server.yaml",
                            "--listen", "127.0.0.1:" + std::to_string(port)},
                           {},
                           dir,
                           dir + "/serve.log"});
  if (!pid) Die(pid.error().message);
  CurlHttpClient http;
  auto ready = Steady::now() + std::chrono::seconds(20);
  while (true) {
    auto r = http.Send({"GET", base_url + "/healthz", {}, "", 1000});
    if (r && r->status == 200) break;
    if (Steady::now() > ready) Die("serve did not come up; see " + dir + "/serve.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<std::pair<std::string, std::string>> auth = {
      {"Authorization", "Bearer " + token}, {"Content-Type", "application/json"}};

  // Register and lease, as fast as the clients go.
  std::vector<std::int64_t> machine(workers), run(workers), fence(workers);
  auto now0 = Steady::now();
  auto t0 = Steady::now();
  auto reg = OpenLoop(workers, clients, [&](int) { return now0; }, [&](CurlHttpClient& c, int i) {
    auto r = c.Send({"POST", base_url + "/api/v1/workers/register", auth,
                     json{{"name", "w" + std::to_string(i)}, {"hostname", "h"}, {"slots", 1}}.dump(),
                     10'000});
    if (!r || r->status != 200) return false;
    machine[i] = json::parse(r->body).value("worker_id", std::int64_t{0});
    auto l = c.Send({"POST", base_url + "/api/v1/workers/" + std::to_string(machine[i]) + "/lease",
                     auth, json{{"max_runs", 1}, {"wait_ms", 0}}.dump(), 10'000});
    if (!l || l->status != 200) return false;
    auto j = json::parse(l->body, nullptr, false);
    if (!j.is_object() || !j.contains("runs") || j["runs"].empty()) return false;
    run[i] = j["runs"][0].value("run_id", std::int64_t{0});
    fence[i] = j["runs"][0].value("token", std::int64_t{0});
    return run[i] > 0;
  });
  double setup_s = std::chrono::duration<double>(Steady::now() - t0).count();
  int setup_failed = static_cast<int>(std::count(reg.begin(), reg.end(), -1.0));
  Figure("workers", workers);
  Figure("register_lease_per_s", workers / setup_s);
  Figure("register_lease_failed", setup_failed);
  if (setup_failed > 0) std::fprintf(stderr, "see %s/serve.log\n", dir.c_str());

  long rss_before = RssKb(*pid);
  std::vector<long> rss;
  std::atomic<bool> sampling{true};
  auto sample0 = Steady::now();
  std::thread sampler([&] {
    for (long tick = 0; sampling; ++tick) {
      rss.push_back(RssKb(*pid));
      if (rss_every > 0 && tick % rss_every == 0) {
        std::printf("rss %.0f %.2f\n",
                    std::chrono::duration<double>(Steady::now() - sample0).count(),
                    rss.back() / 1024.0);
        std::fflush(stdout);
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  // Webhooks meanwhile, from their own clients.
  int hooks = webhook_rate * seconds;
  std::vector<std::string> bodies(hooks), sigs(hooks);
  for (int i = 0; i < hooks; ++i) {
    bodies[i] = json{{"ref", "refs/heads/main"},
                     {"before", before},
                     {"after", after},
                     {"repository", {{"clone_url", url}, {"full_name", "bench/origin"}}}}
                    .dump();
    sigs[i] = "sha256=" + HmacSha256Hex(secret, bodies[i]);
  }
  auto start = Steady::now() + std::chrono::milliseconds(300);
  std::vector<double> hook_latency;
  std::thread webhooks([&] {
    if (hooks == 0) return;
    hook_latency = OpenLoop(
        hooks, 4,
        [&](int i) { return start + std::chrono::microseconds(long(i) * 1'000'000 / webhook_rate); },
        [&](CurlHttpClient& c, int i) {
          auto r = c.Send({"POST", base_url + "/hooks/github",
                           {{"X-GitHub-Event", "push"},
                            {"X-GitHub-Delivery", "hb-" + std::to_string(i)},
                            {"X-Hub-Signature-256", sigs[i]},
                            {"Content-Type", "application/json"}},
                           bodies[i], 10'000});
          return r && r->status == 202;
        });
  });
  int beats = rate * seconds;
  auto beat_latency = OpenLoop(
      beats, clients,
      [&](int i) { return start + std::chrono::microseconds(long(i) * 1'000'000 / rate); },
      [&](CurlHttpClient& c, int i) {
        int w = i % workers;
        if (run[w] == 0) return false;
        auto r = c.Send({"POST", base_url + "/api/v1/runs/" + std::to_string(run[w]) + "/heartbeat",
                         auth, json{{"token", fence[w]}, {"worker_id", machine[w]}}.dump(),
                         10'000});
        return r && r->status == 200;
      });
  double beat_s = std::chrono::duration<double>(Steady::now() - start).count();
  webhooks.join();
  sampling = false;
  sampler.join();
  auto stats = [](const std::string& name, std::vector<double> v) {
    int failed = static_cast<int>(std::count(v.begin(), v.end(), -1.0));
    std::erase(v, -1.0);
    Figure(name + "_failed", failed);
    Figure(name + "_p50_ms", Percentile(v, 0.5));
    Figure(name + "_p90_ms", Percentile(v, 0.9));
    Figure(name + "_p99_ms", Percentile(v, 0.99));
    Figure(name + "_max_ms", Percentile(v, 1.0));
  };
  Figure("heartbeats_sent", beats);
  Figure("heartbeats_per_s", beats / beat_s);
  stats("heartbeat", beat_latency);
  stats("webhook", hook_latency);
  Figure("serve_rss_before_mb", rss_before / 1024.0);
  Figure("serve_rss_max_mb", *std::max_element(rss.begin(), rss.end()) / 1024.0);
  Figure("serve_rss_after_mb", RssKb(*pid) / 1024.0);
  if (!sql::IsPostgresUrl(db)) Figure("db_mb", fs::file_size(db) / 1e6);
  ::kill(*pid, SIGTERM);
  runner.Wait(*pid);
  if (!std::getenv("TRAINQ_BENCH_KEEP")) fs::remove_all(dir);
  return 0;
}
