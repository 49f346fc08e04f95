// Webhook benchmark: signed GitHub push webhooks at a fixed rate against a
// real `trainq serve` on loopback; each push is then processed (mirror
// lookup, tree diff, trainq.yaml, idempotent submit) by the daemon's worker.
//
// Prints the latency of each webhook from the moment it was due to be sent
// to its answer (the answer is given after the push is durably stored, so
// this bounds receive-to-stored from above), the daemon's own
// receive-to-stored histogram from /metrics, errors, how long processing
// took to drain, and the daemon's RSS sampled every second.
//
//   bench_webhooks [--rate 200] [--seconds 30] [--rounds 1] [--clients 16] [--trainq PATH]
//                  [--dir /tmp]
// With --rounds N the load repeats N times against the same daemon: a flat
// RSS shows as no growth from one round to the next.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/triggers/forge.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/store.h"

namespace fs = std::filesystem;
using namespace trainq;
using Steady = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_webhooks: %s\n", what.c_str());
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

// A port nothing listens on: bind port 0, read it back, close.
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

}  // namespace

int main(int argc, char** argv) {
  int rate = 200, seconds = 30, clients = 16, rounds = 1;
  std::string trainq;
  std::string base = fs::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--rate") rate = std::stoi(v);
    else if (a == "--seconds") seconds = std::stoi(v);
    else if (a == "--clients") clients = std::stoi(v);
    else if (a == "--rounds") rounds = std::stoi(v);
    else if (a == "--trainq") trainq = v;
    else if (a == "--dir") base = v;
    else Die("unknown option " + a);
  }
  if (trainq.empty()) {
    trainq = (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "agent/trainq")
                 .string();
  }
  std::string dir = base + "/bench-webhooks-" + std::to_string(getpid());
  fs::create_directories(dir);
  const std::string secret = "bench-secret";
  if (!WriteFile(dir + "/secret", secret)) Die("cannot write the secret");

  // A repository with two experiments and two commits.
  std::string git = "GIT_CONFIG_GLOBAL=/dev/null git -c user.name=b -c user.email=b@b "
                    "-c init.defaultBranch=main -C " + dir + "/origin";
  fs::create_directories(dir + "/origin/configs");
  Shell(git + " init -q");
  (void)WriteFile(dir + "/origin/trainq.yaml",
                  "version: 1\ndefaults:\n  repeats: 2\nexperiments:\n"
                  "  a:\n    command: echo '{\"name\":\"accuracy\",\"value\":0.5}' >> "
                  "\"$TRAINQ_METRICS_FILE\"\n    watch: [configs/a.yaml]\n"
                  "  b:\n    command: echo '{\"name\":\"accuracy\",\"value\":0.6}' >> "
                  "\"$TRAINQ_METRICS_FILE\"\n    watch: [configs/b.yaml]\n");
  (void)WriteFile(dir + "/origin/configs/a.yaml", "lr: 1\n");
  Shell(git + " add -A && " + git + " commit -q -m base");
  (void)WriteFile(dir + "/origin/configs/a.yaml", "lr: 2\n");
  Shell(git + " commit -q -am tune");
  auto rev = [&](const std::string& r) {
    FILE* p = popen((git + " rev-parse " + r).c_str(), "r");
    char buf[64] = {0};
    if (!p || !fgets(buf, sizeof buf, p)) Die("rev-parse");
    pclose(p);
    return std::string(Trim(buf));
  };
  std::string before = rev("HEAD~1"), after = rev("HEAD");
  std::string url = "file://" + dir + "/origin";
  (void)WriteFile(dir + "/server.yaml", "repositories:\n  - url: " + url +
                                            "\n    forge: github\n    secret: {file: " + dir +
                                            "/secret}\n");

  int port = FreePort();
  std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  PosixProcessRunner runner;
  auto pid = runner.Spawn({{trainq, "--db", dir + "/trainq.db", "serve", "--config",
                            dir + "/server.yaml", "--listen", "127.0.0.1:" + std::to_string(port)},
                           {},
                           dir,
                           dir + "/serve.log"});
  if (!pid) Die(pid.error().message);
  CurlHttpClient http;
  auto ready = Steady::now() + std::chrono::seconds(20);
  while (true) {
    auto r = http.Send({"GET", base_url + "/healthz", {}, "", 1000});
    if (r && r->status == 200) break;
    if (Steady::now() > ready) Die("the daemon did not come up; see " + dir + "/serve.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Every delivery is the same push (new delivery ids): the daemon stores
  // each one and processes each one; the submit is idempotent, so the
  // queue does not grow.
  auto body_for = [&]() {
    return nlohmann::json{{"ref", "refs/heads/main"},
                          {"before", before},
                          {"after", after},
                          {"repository", {{"clone_url", url}, {"full_name", "bench/origin"}}}}
        .dump();
  };
  // Warm-up: the first push makes the mirror and the batches.
  {
    std::string body = body_for();
    auto r = http.Send({"POST", base_url + "/hooks/github",
                        {{"X-GitHub-Event", "push"},
                         {"X-GitHub-Delivery", "warmup"},
                         {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)}},
                        body, 5000});
    if (!r || r->status != 202) Die("warm-up webhook failed");
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  long rss_before = RssKb(*pid);

  auto store = Store::Open(dir + "/trainq.db");
  if (!store) Die(store.error().message);
  int total = rate * seconds;
  int failures = 0;
  for (int round = 1; round <= rounds; ++round) {
    // Pre-sign every request, so signing costs the load generator nothing.
    struct Job {
      Steady::time_point due;
      std::string body, sig;
    };
    std::vector<Job> jobs(total);
    auto t0 = Steady::now() + std::chrono::milliseconds(200);
    for (int i = 0; i < total; ++i) {
      jobs[i].due = t0 + std::chrono::microseconds(static_cast<long>(i) * 1'000'000 / rate);
      jobs[i].body = body_for();
      jobs[i].sig = "sha256=" + HmacSha256Hex(secret, jobs[i].body);
    }
    std::vector<double> latency_ms(total, -1);
    std::atomic<int> errors{0}, next{0};
    std::vector<long> rss_samples;
    std::atomic<bool> sampling{true};
    std::thread sampler([&] {
      while (sampling) {
        rss_samples.push_back(RssKb(*pid));
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    });
    // Each client takes the next job, waits until it is due, sends it.
    std::vector<std::thread> pool;
    for (int c = 0; c < clients; ++c) {
      pool.emplace_back([&] {
        CurlHttpClient client;
        while (true) {
          int i = next++;
          if (i >= total) return;
          std::this_thread::sleep_until(jobs[i].due);
          auto r = client.Send({"POST", base_url + "/hooks/github",
                                {{"X-GitHub-Event", "push"},
                                 {"X-GitHub-Delivery",
                                  "bench-" + std::to_string(round) + "-" + std::to_string(i)},
                                 {"X-Hub-Signature-256", jobs[i].sig},
                                 {"Content-Type", "application/json"}},
                                jobs[i].body, 10'000});
          latency_ms[i] =
              std::chrono::duration<double, std::milli>(Steady::now() - jobs[i].due).count();
          if (!r || r->status != 202) ++errors;
        }
      });
    }
    for (auto& t : pool) t.join();
    auto sent_done = Steady::now();
    // Wait for the worker to process every push.
    while (true) {
      auto due = store->pushes().NextPushDue();
      if (due && !*due) break;
      if (Steady::now() - sent_done > std::chrono::seconds(120)) Die("pushes not processed");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    double drain_s = std::chrono::duration<double>(Steady::now() - sent_done).count();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    sampling = false;
    sampler.join();
    long rss_after = RssKb(*pid);

    std::vector<double> lat;
    for (double v : latency_ms) {
      if (v >= 0) lat.push_back(v);
    }
    double elapsed = std::chrono::duration<double>(sent_done - t0).count();
    std::printf("round %d: %d webhooks in %.1f s (%.0f/s, target %d/s), %d errors\n", round, total,
                elapsed, total / elapsed, rate, errors.load());
    std::printf("  latency due->answered (ms): p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n",
                Percentile(lat, 0.5), Percentile(lat, 0.9), Percentile(lat, 0.99),
                Percentile(lat, 1.0));
    std::printf("  processing drained %.2f s after the last webhook\n", drain_s);
    long rss_min = *std::min_element(rss_samples.begin(), rss_samples.end());
    long rss_max = *std::max_element(rss_samples.begin(), rss_samples.end());
    std::printf("  daemon RSS (kB): before %ld, during min %ld max %ld, after %ld\n", rss_before,
                rss_min, rss_max, rss_after);
    rss_before = rss_after;
    failures += errors.load();
  }
  auto counts = store->pushes().CountPushesByState().value_or(
      std::vector<std::pair<std::string, std::int64_t>>{});
  std::printf("pushes by state:");
  for (const auto& [s, n] : counts) std::printf(" %s %lld", s.c_str(), static_cast<long long>(n));
  std::printf("\n");
  auto metrics = http.Send({"GET", base_url + "/metrics", {}, "", 5000});
  if (metrics && metrics->ok()) {
    for (const auto& line : Split(metrics->body, '\n')) {
      if (line.starts_with("trainq_webhook_receive_to_stored_seconds")) {
        std::printf("  %s\n", line.c_str());
      }
    }
  }
  runner.KillGroup(*pid, SIGTERM);
  auto exit = runner.Wait(*pid);
  std::printf("daemon exit: %s; files in %s\n", exit.Describe().c_str(), dir.c_str());
  return failures == 0 ? 0 : 1;
}
