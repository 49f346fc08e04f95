#include "cloud/simulate.h"

#include <catch2/catch.hpp>
#include <string>

namespace trainq::cloud {
namespace {

constexpr TimeMs kSec = 1000;
constexpr TimeMs kMin = 60 * kSec;

TEST_CASE("ParseTrace reads pools and pushes, sorted by time") {
  auto t = ParseTrace(
      "# a day\n"
      "pool gpu min=0 max=5 slots=2 idle_grace=90s boot_timeout=15m hourly_cost=2.5\n"
      "09:30 gpu lstm 10 45m   # comment after a push\n"
      "09:00:30 gpu mlp 20 1h30m\n"
      "09:30 gpu cnn 4 20m\n",
      "day.trace");
  REQUIRE(t);
  REQUIRE(t->pools.size() == 1);
  CHECK(t->pools[0].max == 5);
  CHECK(t->pools[0].slots == 2);
  CHECK(t->pools[0].idle_grace_ms == 90 * kSec);
  CHECK(t->pools[0].boot_timeout_ms == 15 * kMin);
  CHECK(t->pools[0].hourly_cost == 2.5);
  REQUIRE(t->batches.size() == 3);
  CHECK(t->batches[0].experiment == "mlp");
  CHECK(t->batches[0].at_ms == (9 * 3600 + 30) * kSec);
  CHECK(t->batches[0].duration_ms == 90 * kMin);
  CHECK(t->batches[1].experiment == "lstm");
  CHECK(t->batches[1].repeats == 10);
  CHECK(t->pushes == 2);  // two experiments at 09:30 are one push
}

TEST_CASE("ParseTrace names the file and line of a mistake") {
  struct Row {
    std::string text;
    std::string error;
  };
  const std::vector<Row> rows = {
      {"pool gpu\n09:00 cpu x 1 1m\n", "t.trace:2: pool \"cpu\" is not declared above"},
      {"pool gpu\n9h gpu x 1 1m\n", "t.trace:2: TIME: expected HH:MM or HH:MM:SS, got \"9h\""},
      {"pool gpu\n25:00 gpu x 1 1m\n",
       "t.trace:2: TIME: expected HH:MM or HH:MM:SS, got \"25:00\""},
      {"pool gpu\n09:00 gpu x 0 1m\n",
       "t.trace:2: REPEATS: expected a positive integer, got \"0\""},
      {"pool gpu\n09:00 gpu x 2 soon\n", "t.trace:2: DURATION: expected e.g. 45m, got \"soon\""},
      {"pool gpu slot=2\n",
       "t.trace:1: unknown pool key \"slot\" (min, max, slots, idle_grace, "
       "boot_timeout, hourly_cost, broken, failing_after, boot_backoff, budget_day, "
       "budget_month, drain_at_cap)"},
      {"pool gpu min=3 max=2\n", "t.trace:1: pool gpu: needs slots >= 1, max >= 1, min <= max"},
      {"pool gpu\npool gpu\n", "t.trace:2: pool gpu declared twice"},
      {"pool gpu\n09:00 gpu x 2\n", "t.trace:2: expected TIME POOL EXPERIMENT REPEATS DURATION"},
      {"pool gpu\n", "t.trace: no pushes"},
  };
  for (const Row& r : rows) {
    INFO(r.text);
    auto t = ParseTrace(r.text, "t.trace");
    REQUIRE_FALSE(t);
    CHECK(t.error().kind == ErrorKind::kInvalidArgument);
    CHECK(t.error().message == r.error);
  }
}

Trace OneBatch(int max, int repeats, TimeMs duration, TimeMs idle_grace = 2 * kMin) {
  PoolConfig c;
  c.name = "gpu";
  c.max = max;
  c.slots = 2;
  c.idle_grace_ms = idle_grace;
  c.hourly_cost = 3.6;  // $0.001 per second
  Trace t;
  t.pools = {c};
  t.batches = {TraceBatch{0, "gpu", "lstm", repeats, duration}};
  t.pushes = 1;
  return t;
}

TEST_CASE("Simulate: one push on an empty pool, by the autoscaler") {
  // 10 runs of 30 min on 2-slot machines: 5 machines booted at 0, ready at
  // 90 s, results at 1890 s; idle past the 2 min grace at the tick of 2020 s.
  auto r = Simulate(OneBatch(8, 10, 30 * kMin), SimPolicy{}, SimOptions{});
  REQUIRE(r);
  CHECK(r->boots == 5);
  CHECK(r->peak_machines == 5);
  CHECK(r->runs == 10);
  CHECK(r->busy_ms == 5 * 1800 * kSec);
  CHECK(r->billed_ms == 5 * 2020 * kSec);
  CHECK(r->cost == Approx(5 * 2020 * 0.001));
  REQUIRE(r->batches.size() == 1);
  CHECK(r->batches[0].latency_ms == 1890 * kSec);
  CHECK(r->batches[0].ideal_ms == 1890 * kSec);
  CHECK(r->mean_latency_ratio() == Approx(1.0));
}

TEST_CASE("Simulate: the fixed idle timeout keeps machines 10 minutes after the queue empties") {
  SimPolicy fixed{SimPolicy::Kind::kIdleTimeout, 10 * kMin};
  auto r = Simulate(OneBatch(8, 10, 30 * kMin), fixed, SimOptions{});
  REQUIRE(r);
  CHECK(r->boots == 5);
  CHECK(r->busy_ms == 5 * 1800 * kSec);
  CHECK(r->billed_ms == 5 * 2490 * kSec);  // idle from 1890 s, stopped at 1890 + 600
  CHECK(r->batches[0].latency_ms == 1890 * kSec);
}

TEST_CASE("Simulate: max machines bound the batch into waves, and the ideal says so") {
  // max 2 x 2 slots: 10 runs take 3 waves.
  auto r = Simulate(OneBatch(2, 10, 10 * kMin), SimPolicy{}, SimOptions{});
  REQUIRE(r);
  CHECK(r->peak_machines == 2);
  CHECK(r->batches[0].ideal_ms == 90 * kSec + 3 * 10 * kMin);
  CHECK(r->batches[0].latency_ms == 90 * kSec + 3 * 10 * kMin);
}

TEST_CASE("Simulate: a push within the grace reuses the idle machines instead of booting") {
  Trace t = OneBatch(8, 4, 20 * kMin);
  // The first batch ends at 90 s + 20 min = 1290 s; the next push 60 s later.
  t.batches.push_back(TraceBatch{1350 * kSec, "gpu", "cnn", 4, 20 * kMin});
  t.pushes = 2;
  auto r = Simulate(t, SimPolicy{}, SimOptions{});
  REQUIRE(r);
  CHECK(r->boots == 2);
  CHECK(r->batches[1].latency_ms == 20 * kMin);  // no boot delay: below its ideal
  CHECK(r->batches[1].latency_ms < r->batches[1].ideal_ms);
}

TEST_CASE("Simulate: a push after the grace boots again") {
  Trace t = OneBatch(8, 4, 20 * kMin);
  t.batches.push_back(TraceBatch{1290 * kSec + 5 * kMin, "gpu", "cnn", 4, 20 * kMin});
  t.pushes = 2;
  auto r = Simulate(t, SimPolicy{}, SimOptions{});
  REQUIRE(r);
  CHECK(r->boots == 4);
  CHECK(r->peak_machines == 2);
}

TEST_CASE("Simulate: a week of a pool whose machines never register: the back-off ends it "
          "failing, without it, a boot every boot_timeout all week") {
  auto t = ParseTrace(
      "pool bad max=2 slots=1 boot_timeout=10m hourly_cost=4 broken=1\n"
      "09:00 bad llm 4 2h\n",
      "bad.trace");
  REQUIRE(t);
  SimOptions o;
  o.days = 7;
  auto with = Simulate(*t, {}, o);
  REQUIRE(with);
  CHECK(with->failing_pools == std::vector<std::string>{"bad"});
  CHECK(with->boots == 3);  // two at first, both fail at 10 min, then one more
  CHECK(with->billed_ms <= 3 * (10 * kMin + 10 * kSec));  // stopped at the tick after boot_timeout
  CHECK(with->unfinished_runs == 28);
  o.safeguards = false;
  auto without = Simulate(*t, {}, o);
  REQUIRE(without);
  CHECK(without->failing_pools.empty());
  // Two machines, replaced every ~10 min from the first push to the end of the week.
  CHECK(without->boots > 1500);
  CHECK(without->cost > 100 * with->cost);
}

TEST_CASE("Simulate: a daily budget caps each day's cost, without it the day costs more") {
  auto t = ParseTrace(
      "pool gpu max=8 slots=1 idle_grace=2m boot_timeout=10m hourly_cost=2 budget_day=10 "
      "drain_at_cap=1\n"
      "09:00 gpu mlp 16 1h\n",
      "budget.trace");
  REQUIRE(t);
  SimOptions o;
  o.days = 2;
  auto capped = Simulate(*t, {}, o);
  REQUIRE(capped);
  auto free = Simulate(*t, {}, SimOptions{.days = 2, .safeguards = false});
  REQUIRE(free);
  // 16 machine-hours a day cost $32 uncapped (plus boot time). Capped at $10 a
  // day with drain_at_cap: boots stop once the next minimum bill would pass
  // it, and the 8 machines up finish the run they hold and take no more, so
  // a day ends at its first wave (8 x 1h30s x $2 = $16.40).
  CHECK(free->cost > 2 * 32);
  CHECK(capped->cost < 2 * 17);
  CHECK(capped->unfinished_runs > 0);
  CHECK(free->unfinished_runs == 0);
}

TEST_CASE("Simulate refuses a tick that is not whole seconds") {
  SimOptions o;
  o.tick_ms = 1500;
  auto r = Simulate(OneBatch(2, 2, kMin), SimPolicy{}, o);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace trainq::cloud
