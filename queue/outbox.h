// Outbox (issue 43): messages to outside services that must go out once,
// whatever happens to serve or to the service: a part of Store
// (queue/store.h; `store.outbox()`) over its one connection.
//
// A row is one message to one target ("notify:ml-alerts"; the prefix names
// the sender). It is keyed by (target, event_key): enqueueing the same event
// twice, from a scan repeated after a restart, keeps the first row, so each
// event is sent once. The row carries a delivery id chosen when it was
// written, the same on every retry, so a receiver that got a message whose
// answer was lost can tell the retry apart. Backoff and giving up live in
// the row (not_before_ms, attempts, state), as for commit statuses: the
// sending loop is thin and restartable.
//
// Marks are small named values the senders keep beside their rows: a scan's
// cursor ("notify:cursor"), and the conditions that hold now ("pool gpu is
// failing since T"), so a condition that lasts is one message, and one that
// ends and comes back is a new one, across restarts too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"

namespace trainq {

struct StoreParts;

struct OutboxRow {
  std::int64_t id = 0;
  std::string target;
  std::string event_key;
  std::string kind;
  std::string delivery_id;
  std::string payload;  // JSON, what the sender renders the message from
  std::string state;    // pending | delivered | gave_up
  int attempts = 0;     // failed tries so far
  TimeMs not_before_ms = 0;
  std::string last_error;
  TimeMs created_ms = 0;
  std::optional<TimeMs> delivered_ms;
};

// Per target, for the dashboard and `trainq notify status`.
struct OutboxTargetSummary {
  std::string target;
  std::int64_t pending = 0;
  std::int64_t delivered = 0;
  std::int64_t gave_up = 0;
  std::optional<TimeMs> last_delivered_ms;
  std::string last_delivered_kind;
  // The newest error and when (compare with last_delivered_ms to tell
  // whether the target works again).
  std::optional<TimeMs> last_error_ms;
  std::string last_error;
};

class Outbox {
 public:
  // Writes the message unless (target, event_key) has one: true when written.
  Result<bool> Enqueue(const std::string& target, const std::string& event_key,
                       const std::string& kind, const std::string& delivery_id,
                       const std::string& payload, TimeMs now);
  // Pending rows whose time has come, oldest first, of targets starting with
  // `target_prefix`.
  Result<std::vector<OutboxRow>> Due(const std::string& target_prefix, TimeMs now, int limit);
  // The row of (target, event_key), if any.
  Result<std::optional<OutboxRow>> Find(const std::string& target, const std::string& event_key);
  Status MarkDelivered(std::int64_t id, TimeMs now);
  // A failed try: attempts + 1, the error, and either the next try's time or,
  // with `give_up`, state gave_up.
  Status MarkFailed(std::int64_t id, const std::string& error, TimeMs not_before, bool give_up,
                    TimeMs now);
  // Holds a pending row back until `not_before` without counting a try (a
  // target over its rate limit).
  Status Defer(std::int64_t id, TimeMs not_before);
  // Messages delivered to `target` at or after `since`.
  Result<std::int64_t> DeliveredSince(const std::string& target, TimeMs since);
  Result<std::vector<OutboxTargetSummary>> Summaries(const std::string& target_prefix);
  // A target's newest rows, newest first.
  Result<std::vector<OutboxRow>> Recent(const std::string& target, int limit);

  // Marks: nullopt when unset.
  Result<std::optional<std::string>> Mark(const std::string& name);
  Status SetMark(const std::string& name, const std::string& value, TimeMs now);
  Status ClearMark(const std::string& name);
  // Marks whose names start with `prefix`, as (name, value).
  Result<std::vector<std::pair<std::string, std::string>>> Marks(const std::string& prefix);

  // What the notification scan reads besides the run queue: the ref whose
  // push queued a batch ("" when none: `trainq submit`), and the queue's
  // progress: the oldest queued run's creation time and the newest end of a
  // run (nullopt when there is none).
  Result<std::string> BatchRef(std::int64_t batch_id);
  Result<std::optional<TimeMs>> OldestQueuedMs();
  Result<std::optional<TimeMs>> LastFinishedMs();
  // Batches that take `batch_id` as their baseline (they may get a verdict
  // once it ends).
  Result<std::vector<std::int64_t>> BatchesWithBaseline(std::int64_t batch_id);

 private:
  friend struct StoreParts;
  explicit Outbox(StoreParts& parts);
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  sql::Db& db_;
};

}  // namespace trainq
