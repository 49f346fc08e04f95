// Notifications (issue 43): what needs a person, told where the team looks.
//
//   NotifyScanner   finds events in the store and writes one outbox row per
//                   (target, event) (queue/outbox.h): batch events from the
//                   runs that ended since its cursor, conditions (a failing
//                   pool, a budget past its warning level, a stuck queue) from
//                   the pools and the queue. Idempotent: rescanning writes
//                   nothing new, so a restart sends nothing twice.
//   NotifySender    sends the due rows: Slack's incoming-webhook JSON, or the
//                   signed JSON of a generic webhook (NotifyWebhookRequest);
//                   retried with backoff, given up on a permanent refusal,
//                   rate-limited per target.
//   Notifier        both on a thread of `trainq serve` with its own Store, so
//                   neither a slow target nor a scan ever holds up a verdict,
//                   a push or a lease.
// The events, the body and the signature: docs/notifications.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "agent/triggers/notify_config.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/store.h"

namespace trainq {

// The body's `schema`: a change that removes or renames a field gets a new one.
inline constexpr std::string_view kNotifySchema = "trainq.notification/1";

// One event, as the outbox keeps it and the webhook body carries it.
struct NotifyEvent {
  std::string kind;        // one of kNotifyEvents, or "test"
  std::string key;         // what makes it one event: "worse:batch:42"
  TimeMs at_ms = 0;
  std::string summary;     // one line, plain text
  std::string url;         // the dashboard's page about it ("" without public_url)
  std::string repository;  // the configured url (or the store's, for `trainq submit`)
  std::string project;     // owner/name, "" when not a forge's
  std::string branch;      // "main"; "" when no branch queued it
  std::string sha;
  std::string experiment;
  std::string pool;
  nlohmann::json details = nlohmann::json::object();
};

// The event's JSON (the webhook body less `delivery`) and back.
nlohmann::json NotifyEventJson(const NotifyEvent& e);
// The webhook body: {"schema", "delivery", "event", "key", "at", ...}.
std::string NotifyWebhookBody(const nlohmann::json& event, const std::string& delivery_id);
// The generic webhook's POST: the body, `X-Trainq-Event`, `X-Trainq-Delivery`
// and `X-Trainq-Signature-256: sha256=<HMAC-SHA256 of the body, hex>`.
HttpRequest NotifyWebhookRequest(const NotifyTarget& t, const nlohmann::json& event,
                                 const std::string& delivery_id);
// Slack's text: `&`, `<` and `>` escaped, the link as <url|label>.
std::string SlackText(const nlohmann::json& event);
// Slack's incoming-webhook POST: {"text": ...} as JSON.
HttpRequest SlackRequest(const NotifyTarget& t, const nlohmann::json& event);
// The request for target `t`.
HttpRequest NotifyRequest(const NotifyTarget& t, const nlohmann::json& event,
                          const std::string& delivery_id);
// What `trainq notify test` sends: a sample of each field.
NotifyEvent SampleNotifyEvent(const ServerConfig& config, TimeMs now);

struct NotifyOptions {
  std::string data_dir;                      // serve's: mirrors map store urls to the config's
  TimeMs queue_stuck_after_ms = 30 * 60'000;  // queued, nothing running or ending, this long
  double budget_warn = 0.8;                  // of a cap: the `budget` event
  TimeMs retry_base_ms = 5'000;              // 5 s, 10 s, 20 s, ... at most retry_max_ms
  TimeMs retry_max_ms = 15 * 60'000;
  int max_attempts = 15;                     // about 2 h 20 min of tries, then given up
  TimeMs timeout_ms = 10'000;                // one delivery
  TimeMs idle_wait_ms = 1'000;               // the thread's wait between passes
};

class NotifyScanner {
 public:
  NotifyScanner(Store& store, const ServerConfig& config, const Clock& clock,
                NotifyOptions options = {});
  // One pass; returns the outbox rows written.
  Result<int> Step();

 private:
  Result<int> ScanBatches(TimeMs now);
  Result<int> ScanConditions(TimeMs now);
  Result<int> Emit(const NotifyEvent& e);
  // Which configured repository a store url is ("" when none).
  const RepoConfig* RepoOf(const std::string& store_url) const;

  Store& store_;
  const ServerConfig& config_;
  const Clock& clock_;
  NotifyOptions options_;
};

class NotifySender {
 public:
  NotifySender(Store& store, const ServerConfig& config, HttpClient& http, const Clock& clock,
               NotifyOptions options = {});
  // Sends what is due; returns how many sends were tried.
  Result<int> Step();

 private:
  Store& store_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  NotifyOptions options_;
};

// Each configured target with its deliveries (the dashboard's
// /dash/api/notify): name, kind, events, counts, the last delivery and the
// last error with their times (ms, null when none). Never a URL of a Slack
// target (a secret).
Result<nlohmann::json> NotifyTargetsJson(Store& store, const ServerConfig& config);

// Sends `event` to `t` now, outside the outbox (`trainq notify test`): ok, or
// why not ("HTTP 404 from the Slack webhook of ml-alerts: channel_not_found").
Status SendNotifyNow(const NotifyTarget& t, const NotifyEvent& event, HttpClient& http,
                     TimeMs timeout_ms = 10'000);

class Notifier {
 public:
  Notifier(std::string db_path, const ServerConfig& config, HttpClient& http, const Clock& clock,
           NotifyOptions options);
  ~Notifier();  // Stop()
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  Status Start();
  void Stop();

 private:
  void Loop(Store store);
  std::string db_path_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  NotifyOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace trainq
