// The outbox part of the Store: one row per (target, event) whatever the
// number of scans, the delivery id kept across tries, backoff and giving up
// in the row, per-target summaries, and marks that survive a reopen.
#include "queue/outbox.h"

#include <catch2/catch.hpp>

#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

TEST_CASE("outbox: an event is written once per target, also after a reopen", "[outbox]") {
  testing::TempDir tmp;
  {
    auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
    CHECK(store.outbox().Enqueue("notify:a", "worse:batch:1", "worse", "d1", "{}", kT0).value());
    CHECK_FALSE(
        store.outbox().Enqueue("notify:a", "worse:batch:1", "worse", "d2", "{}", kT0 + 1).value());
    CHECK(store.outbox().Enqueue("notify:b", "worse:batch:1", "worse", "d3", "{}", kT0).value());
  }
  auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
  CHECK_FALSE(
      store.outbox().Enqueue("notify:a", "worse:batch:1", "worse", "d4", "{}", kT0 + 2).value());
  auto due = store.outbox().Due("notify:", kT0, 10).value();
  REQUIRE(due.size() == 2);
  CHECK(due[0].delivery_id == "d1");  // the first write's id, kept
  CHECK(due[1].target == "notify:b");
  CHECK(store.outbox().Due("mlflow", kT0, 10).value().empty());
}

TEST_CASE("outbox: backoff, giving up and delivery live in the row", "[outbox]") {
  testing::TempDir tmp;
  auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
  auto& o = store.outbox();
  REQUIRE(o.Enqueue("notify:a", "k1", "pool_failing", "d1", "{}", kT0).value());
  REQUIRE(o.Enqueue("notify:a", "k2", "budget", "d2", "{}", kT0).value());
  auto due = o.Due("notify:", kT0, 10).value();
  REQUIRE(due.size() == 2);
  REQUIRE(o.MarkFailed(due[0].id, "HTTP 500", kT0 + 5'000, false, kT0));
  auto later = o.Due("notify:", kT0 + 1'000, 10).value();
  REQUIRE(later.size() == 1);
  CHECK(later[0].event_key == "k2");
  REQUIRE(o.MarkDelivered(later[0].id, kT0 + 1'000));
  auto again = o.Due("notify:", kT0 + 5'000, 10).value();
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempts == 1);
  CHECK(again[0].last_error == "HTTP 500");
  CHECK(again[0].delivery_id == "d1");

  auto sums = o.Summaries("notify:").value();
  REQUIRE(sums.size() == 1);
  CHECK(sums[0].pending == 1);
  CHECK(sums[0].delivered == 1);
  CHECK(sums[0].last_delivered_kind == "budget");
  CHECK(sums[0].last_error == "HTTP 500");
  CHECK(*sums[0].last_error_ms < *sums[0].last_delivered_ms);  // the target works again

  REQUIRE(o.MarkFailed(again[0].id, "refused", kT0 + 20'000, true, kT0 + 6'000));
  CHECK(o.Due("notify:", kT0 + 100'000, 10).value().empty());
  sums = o.Summaries("notify:").value();
  CHECK(sums[0].gave_up == 1);
  CHECK(sums[0].last_error == "refused");
  CHECK(o.DeliveredSince("notify:a", kT0).value() == 1);
  CHECK(o.DeliveredSince("notify:a", kT0 + 1'001).value() == 0);

  REQUIRE(o.Defer(o.Find("notify:a", "k1").value()->id, kT0));
  CHECK(o.Find("notify:a", "k1").value()->state == "gave_up");
}

TEST_CASE("outbox: marks are kept, listed by prefix and cleared", "[outbox]") {
  testing::TempDir tmp;
  {
    auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
    REQUIRE(store.outbox().SetMark("notify:cond:pool_failing:gpu", "123", kT0));
    REQUIRE(store.outbox().SetMark("notify:cursor", "1:2", kT0));
    REQUIRE(store.outbox().SetMark("notify:cursor", "5:6", kT0));
  }
  auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
  CHECK(store.outbox().Mark("notify:cursor").value() == "5:6");
  auto conds = store.outbox().Marks("notify:cond:").value();
  REQUIRE(conds.size() == 1);
  CHECK(conds[0].first == "notify:cond:pool_failing:gpu");
  REQUIRE(store.outbox().ClearMark("notify:cond:pool_failing:gpu"));
  CHECK_FALSE(store.outbox().Mark("notify:cond:pool_failing:gpu").value());
}

TEST_CASE("outbox: the queue's progress for the stuck check", "[outbox]") {
  testing::TempDir tmp;
  auto store = Store::Open(testing::StoreLocation(tmp, "q.db")).value();
  CHECK_FALSE(store.outbox().OldestQueuedMs().value());
  CHECK_FALSE(store.outbox().LastFinishedMs().value());
  BatchSpec spec;
  spec.experiment = "e";
  spec.command = "true";
  spec.repeats = 2;
  REQUIRE(store.runs().Submit("/r", {"abc", "", "s", "me", 0}, {spec}, kT0));
  CHECK(store.outbox().OldestQueuedMs().value() == kT0);
  auto leased = store.runs().Lease("w", kT0 + 10, 60'000, 1).value();
  REQUIRE(leased.size() == 1);
  REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, kT0 + 500, 0.5));
  CHECK(store.outbox().LastFinishedMs().value() == kT0 + 500);
  CHECK(store.outbox().BatchRef(leased[0].batch_id).value() == "");
}

}  // namespace
