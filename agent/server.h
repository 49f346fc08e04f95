// The routes of `trainq serve`'s HTTP server, independent of sockets:
//   POST /hooks/github, /hooks/gitlab, /hooks/gitea   webhooks (agent/webhook.h)
//   GET  /api/v1/status                               what `trainq status --json` prints
//   GET  /healthz                                     200 while the store answers
//   GET  /metrics                                     Prometheus text format
// Every state-changing route is authenticated (webhooks by signature or
// token); the read routes are open, which is why the default listen address
// is loopback only.
// Threading: Handle() is called from the listener's threads at once; the
// server keeps one Store for writes and one for reads, each behind a mutex.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "agent/server_config.h"
#include "agent/server_http.h"
#include "core/clock.h"
#include "queue/store.h"

namespace trainq {

class Server {
 public:
  Server(const ServerConfig& config, std::string db_path, const Clock& clock);
  // Opens the server's own store connections.
  Status Open();
  HttpServerReply Handle(const HttpServerRequest& request);
  // Called after a push was recorded (wakes the worker).
  void set_on_push(std::function<void()> on_push) { on_push_ = std::move(on_push); }

  std::string MetricsText();

 private:
  HttpServerReply Webhook(ForgeKind forge, const HttpServerRequest& request);

  const ServerConfig& config_;
  std::string db_path_;
  const Clock& clock_;
  std::function<void()> on_push_;
  std::mutex write_mu_;
  std::optional<Store> write_store_;
  std::mutex read_mu_;
  std::optional<Store> read_store_;

  // Webhook deliveries by (forge, result) since start, and how long
  // receive-to-stored took (a histogram, seconds).
  std::mutex counters_mu_;
  std::map<std::pair<std::string, std::string>, std::int64_t> deliveries_;
  static constexpr std::array<double, 10> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,  0.1,    0.25,  0.5,  1.0};
  std::array<std::int64_t, kBuckets.size()> latency_buckets_{};
  std::int64_t latency_count_ = 0;
  double latency_sum_ = 0;
};

}  // namespace trainq
