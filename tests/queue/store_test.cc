#include "queue/store.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "core/strings.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/wal_check.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;
constexpr TimeMs kLease = 60'000;

CommitInfo MakeCommit(const std::string& sha = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  c.message = "tweak lr";
  c.author = "Ada";
  c.committed_ms = kT0;
  return c;
}

BatchSpec MakeSpec(const std::string& name = "mlp", int repeats = 3, int max_attempts = 3) {
  BatchSpec b;
  b.experiment = name;
  b.command = "python train.py --seed {seed}";
  b.repeats = repeats;
  b.seed_start = 1;
  b.max_attempts = max_attempts;
  b.timeout_s = 60;
  return b;
}

struct Fixture {
  testing::TempDir dir;
  std::string path = testing::StoreLocation(dir, "trainq.db");
  Store store = Store::Open(path, Options()).value();

  static StoreOptions Options() {
    StoreOptions o;
    o.backoff_base_ms = 1000;
    o.backoff_cap_ms = 8000;
    return o;
  }
  std::int64_t Submit(int repeats = 3, int max_attempts = 3, const std::string& name = "mlp") {
    auto r = store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec(name, repeats, max_attempts)}, kT0);
    REQUIRE(r);
    return r->front().batch_id;
  }
  RunRow Get(std::int64_t id) { return store.runs().Run(id).value().value(); }
};

}  // namespace

TEST_CASE("A new store is at the current schema version", "[store]") {
  Fixture f;
  CHECK(f.store.schema_version() == Store::kSchemaVersion);
}

TEST_CASE("Submit creates one batch per experiment and one run per seed", "[store]") {
  Fixture f;
  auto r = f.store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec("a", 3), MakeSpec("b", 2)}, kT0);
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK(r->at(0).created);
  CHECK(r->at(0).runs_added == 3);
  CHECK(r->at(1).runs_added == 2);
  auto runs = f.store.runs().Runs(r->at(0).batch_id, std::nullopt, 0).value();
  REQUIRE(runs.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(runs[i].seed == 1 + i);
    CHECK(runs[i].repeat == i);
    CHECK(runs[i].state == RunState::kQueued);
  }
}

TEST_CASE("Submitting the same commit twice creates nothing, more repeats top up", "[store]") {
  Fixture f;
  auto first = f.Submit(3);
  auto again = f.store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec("mlp", 3)}, kT0 + 5);
  REQUIRE(again);
  CHECK_FALSE(again->front().created);
  CHECK(again->front().batch_id == first);
  CHECK(again->front().runs_added == 0);
  auto more = f.store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec("mlp", 5)}, kT0 + 6);
  REQUIRE(more);
  CHECK(more->front().runs_added == 2);
  auto runs = f.store.runs().Runs(first, std::nullopt, 0).value();
  REQUIRE(runs.size() == 5);
  CHECK(runs.back().seed == 5);  // seeds continue, never shift
  CHECK(f.store.runs().Batch(first).value()->repeats == 5);
}

TEST_CASE("A failed submission writes nothing (no half-written batch)", "[store]") {
  Fixture f;
  auto bad = MakeSpec("bad", 0);
  auto r = f.store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec("good", 3), bad}, kT0);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kInvalidArgument);
  CHECK(f.store.runs().Batches(false, 0).value().empty());
  auto counts = f.store.runs().CountByState().value();
  for (auto c : counts) CHECK(c == 0);
}

TEST_CASE("Lease hands out each run once, oldest first, with a token", "[store]") {
  Fixture f;
  f.Submit(3);
  auto a = f.store.runs().Lease("w1", kT0, kLease, 2).value();
  REQUIRE(a.size() == 2);
  CHECK(a[0].seed == 1);
  CHECK(a[1].seed == 2);
  // Lease tokens prove a lease on run routes: never a small counter.
  CHECK(a[0].token > (std::int64_t{1} << 32));
  CHECK(a[0].token < (std::int64_t{1} << 53));
  CHECK(a[1].token > (std::int64_t{1} << 32));
  CHECK(a[0].attempt == 1);
  CHECK(a[0].expires_ms == kT0 + kLease);
  CHECK(a[0].command == "python train.py --seed {seed}");
  CHECK(a[0].repo_url == "/repos/demo");
  auto b = f.store.runs().Lease("w2", kT0, kLease, 5).value();
  REQUIRE(b.size() == 1);
  CHECK(b[0].seed == 3);
  CHECK(f.store.runs().Lease("w3", kT0, kLease, 5).value().empty());
  CHECK(f.Get(a[0].run_id).state == RunState::kLeased);
  CHECK(f.Get(a[0].run_id).worker == "w1");
}

TEST_CASE("Lease tokens are not guessable: 200 first leases, 200 distinct tokens, none a "
          "neighbour of another", "[store]") {
  Fixture f;
  f.Submit(200);
  auto leased = f.store.runs().Lease("w1", kT0, kLease, 200).value();
  REQUIRE(leased.size() == 200);
  std::set<std::int64_t> tokens;
  for (const auto& l : leased) tokens.insert(l.token);
  CHECK(tokens.size() == 200);
  int neighbours = 0;
  for (auto t : tokens) neighbours += tokens.contains(t + 1);
  CHECK(neighbours == 0);
}

TEST_CASE("Complete stores the metric, a stale token is refused", "[store]") {
  Fixture f;
  f.Submit(1);
  auto l = f.store.runs().Lease("w1", kT0, kLease, 1).value().at(0);
  REQUIRE(f.store.runs().MarkRunning(l.run_id, l.token, kT0 + 1, "/tmp/log"));
  CHECK(f.Get(l.run_id).state == RunState::kRunning);
  auto stale = f.store.runs().Complete(l.run_id, l.token + 1, kT0 + 2, 0.5);
  REQUIRE_FALSE(stale);
  CHECK(stale.error().kind == ErrorKind::kConflict);
  CHECK(stale.error().message.find("is not the run's current lease") != std::string::npos);
  // The refusal does not give the current token away.
  CHECK(stale.error().message.find(std::to_string(l.token)) == std::string::npos);
  REQUIRE(f.store.runs().Complete(l.run_id, l.token, kT0 + 3, 0.66));
  auto row = f.Get(l.run_id);
  CHECK(row.state == RunState::kSucceeded);
  CHECK(row.metric_value.value() == Approx(0.66));
  CHECK(row.finished_ms.value() == kT0 + 3);
  // A second completion (a retried request) is refused: the run is no longer leased.
  auto twice = f.store.runs().Complete(l.run_id, l.token, kT0 + 4, 0.1);
  REQUIRE_FALSE(twice);
  CHECK(twice.error().kind == ErrorKind::kConflict);
  CHECK(f.Get(l.run_id).metric_value.value() == Approx(0.66));
}

TEST_CASE("An expired lease puts the run back, the old holder is fenced off", "[store]") {
  Fixture f;
  f.Submit(1);
  auto old = f.store.runs().Lease("w1", kT0, kLease, 1).value().at(0);
  // Heartbeats extend the lease.
  auto hb = f.store.runs().Heartbeat(old.run_id, old.token, kT0 + 50'000, kLease);
  REQUIRE(hb);
  CHECK(*hb == kT0 + 50'000 + kLease);
  CHECK(f.store.runs().ExpireLeases(kT0 + kLease + 1).value() == 0);  // extended: not expired
  CHECK(f.store.runs().ExpireLeases(kT0 + 50'000 + kLease + 1).value() == 1);
  auto row = f.Get(old.run_id);
  CHECK(row.state == RunState::kFailed);
  CHECK(row.last_error.find("lease expired") != std::string::npos);
  // Leasable again once the backoff has passed.
  TimeMs later = kT0 + 50'000 + kLease + 1 + f.store.BackoffMs(1);
  auto fresh = f.store.runs().Lease("w2", later, kLease, 1).value();
  REQUIRE(fresh.size() == 1);
  CHECK(fresh[0].token > old.token);  // fencing: a new lease's token is larger
  CHECK(fresh[0].attempt == 2);
  // The first worker wakes up and tries to report: refused.
  auto late = f.store.runs().Complete(old.run_id, old.token, later + 1, 0.9);
  REQUIRE_FALSE(late);
  CHECK(late.error().kind == ErrorKind::kConflict);
  REQUIRE(f.store.runs().Complete(fresh[0].run_id, fresh[0].token, later + 2, 0.7));
  CHECK(f.Get(old.run_id).metric_value.value() == Approx(0.7));
}

TEST_CASE("Failures back off exponentially, then the run is dead", "[store]") {
  Fixture f;
  f.Submit(1, 3);
  CHECK(f.store.BackoffMs(1) == 1000);
  CHECK(f.store.BackoffMs(2) == 2000);
  CHECK(f.store.BackoffMs(3) == 4000);
  CHECK(f.store.BackoffMs(10) == 8000);  // capped

  TimeMs now = kT0;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto l = f.store.runs().Lease("w", now, kLease, 1).value();
    REQUIRE(l.size() == 1);
    CHECK(l[0].attempt == attempt);
    auto next = f.store.runs().FailRun(l[0].run_id, l[0].token, now, "exit code 1", 1);
    REQUIRE(next);
    if (attempt < 3) {
      CHECK(*next == RunState::kFailed);
      auto row = f.Get(l[0].run_id);
      CHECK(row.not_before_ms.value() == now + f.store.BackoffMs(attempt));
      // Not leasable before the backoff has passed.
      CHECK(f.store.runs().Lease("w", now + f.store.BackoffMs(attempt) - 1, kLease, 1).value().empty());
      now += f.store.BackoffMs(attempt);
    } else {
      CHECK(*next == RunState::kDead);
    }
  }
  auto row = f.store.runs().Runs(std::nullopt, std::nullopt, 0).value().at(0);
  CHECK(row.state == RunState::kDead);
  CHECK(row.attempts == 3);
  CHECK(row.last_error == "exit code 1");
  CHECK(row.exit_code.value() == 1);
  CHECK(f.store.runs().Lease("w", now + 10'000'000, kLease, 1).value().empty());
}

TEST_CASE("A failure not worth retrying is dead at once, outcomes are listed once each",
          "[store]") {
  Fixture f;
  f.Submit(3, 3);  // 3 runs, 3 attempts each
  auto l = f.store.runs().Lease("w", kT0, kLease, 3).value();
  REQUIRE(l.size() == 3);
  CHECK(f.store.runs().FailRun(l[0].run_id, l[0].token, kT0 + 5, "exit code 2 (configuration error)", 2,
                        /*retry=*/false)
            .value() == RunState::kDead);
  CHECK(f.Get(l[0].run_id).attempts == 1);
  CHECK(f.store.runs().FailRun(l[1].run_id, l[1].token, kT0 + 5, "exit code 1", 1).value() ==
        RunState::kFailed);
  REQUIRE(f.store.runs().Complete(l[2].run_id, l[2].token, kT0 + 7, 0.5));
  auto all = f.store.runs().RunsFinishedAfter(kT0, 0, 10).value();
  REQUIRE(all.size() == 3);
  CHECK(all[0].id == l[0].run_id);
  CHECK(all[0].state == RunState::kDead);
  CHECK(all[1].id == l[1].run_id);
  CHECK(all[2].state == RunState::kSucceeded);
  // After the cursor (finished_ms, id): only what came later.
  auto later = f.store.runs().RunsFinishedAfter(kT0 + 5, l[1].run_id, 10).value();
  REQUIRE(later.size() == 1);
  CHECK(later[0].id == l[2].run_id);
  CHECK(f.store.runs().RunsFinishedAfter(kT0 + 7, l[2].run_id, 10).value().empty());
}

TEST_CASE("An expired lease on the last attempt makes the run dead", "[store]") {
  Fixture f;
  f.Submit(1, 1);
  auto l = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  CHECK(f.store.runs().ExpireLeases(kT0 + kLease + 1).value() == 1);
  CHECK(f.Get(l.run_id).state == RunState::kDead);
}

TEST_CASE("Interrupt returns the run without using an attempt", "[store]") {
  Fixture f;
  f.Submit(1, 1);
  auto l = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  REQUIRE(f.store.runs().Interrupt(l.run_id, l.token, kT0 + 1, "preempted"));
  auto row = f.Get(l.run_id);
  CHECK(row.state == RunState::kQueued);
  CHECK(row.attempts == 0);
  auto again = f.store.runs().Lease("w", kT0 + 2, kLease, 1).value();
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempt == 1);  // max_attempts = 1 still allows this try
}

TEST_CASE("Cancel stops queued and leased runs and fences their holders", "[store]") {
  Fixture f;
  auto batch = f.Submit(3);
  auto l = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  REQUIRE(f.store.runs().Complete(l.run_id, l.token, kT0 + 1, 0.5));
  auto l2 = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  CHECK(f.store.runs().CancelBatch(batch, kT0 + 2).value() == 2);
  auto hb = f.store.runs().Heartbeat(l2.run_id, l2.token, kT0 + 3, kLease);
  REQUIRE_FALSE(hb);
  CHECK(hb.error().kind == ErrorKind::kConflict);
  CHECK(hb.error().message.find("cancelled") != std::string::npos);
  CHECK(f.Get(l.run_id).state == RunState::kSucceeded);  // finished runs keep their result
  CHECK(f.store.runs().Lease("w", kT0 + 4, kLease, 5).value().empty());
  auto missing = f.store.runs().CancelBatch(999, kT0);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().kind == ErrorKind::kNotFound);
  // Cancelling one run.
  auto other = f.store.runs().Submit("/repos/demo", MakeCommit(), {MakeSpec("other", 2)}, kT0).value();
  auto runs = f.store.runs().Runs(other.front().batch_id, std::nullopt, 0).value();
  CHECK(f.store.runs().CancelRun(runs[0].id, kT0).value() == 1);
  CHECK(f.store.runs().CancelRun(runs[0].id, kT0).value() == 0);
  CHECK(f.Get(runs[1].id).state == RunState::kQueued);
}

TEST_CASE("A dead or cancelled run can be retried: a fresh round of attempts, its history kept",
          "[store][retry]") {
  Fixture f;
  auto batch = f.Submit(3, 2);  // 3 runs, 2 attempts each
  auto l = f.store.runs().Lease("w", kT0, kLease, 3).value();
  REQUIRE(l.size() == 3);
  std::int64_t dead = l[0].run_id, ok = l[1].run_id, live = l[2].run_id;
  REQUIRE(f.store.runs().FailRun(dead, l[0].token, kT0 + 5, "exit code 3: CUDA out of memory", 3,
                                 /*retry=*/false));
  REQUIRE(f.store.runs().Complete(ok, l[1].token, kT0 + 6, 0.5));
  REQUIRE(f.Get(dead).state == RunState::kDead);
  CHECK(f.store.runs().CountByState().value()[static_cast<int>(RunState::kDead)] == 1);

  // A run that succeeded keeps its result; one still in the queue is not retried.
  auto refused = f.store.runs().RetryRun(ok, kT0 + 10, "cli");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == ErrorKind::kConflict);
  CHECK(refused.error().message.find("succeeded") != std::string::npos);
  CHECK(f.Get(ok).state == RunState::kSucceeded);
  CHECK(f.Get(ok).metric_value.value() == Approx(0.5));
  auto running = f.store.runs().RetryRun(live, kT0 + 10, "cli");
  REQUIRE_FALSE(running);
  CHECK(running.error().kind == ErrorKind::kConflict);
  CHECK(f.Get(live).state == RunState::kLeased);
  auto missing = f.store.runs().RetryRun(999, kT0 + 10, "cli");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().kind == ErrorKind::kNotFound);

  // Its batch's commit status had gone final; it is pending again.
  Pushes::CommitStatus cs;
  cs.batch_id = batch;
  cs.repo_url = "https://github.com/acme/model.git";
  cs.sha = MakeCommit().sha;
  cs.context = "trainq/mlp";
  cs.state = "pending";
  REQUIRE(f.store.pushes().AddCommitStatus(cs, kT0));
  REQUIRE(f.store.pushes().SetCommitStatusWanted(batch, "failure", "1 failed", kT0 + 9));
  REQUIRE(f.store.runs().RetryRun(dead, kT0 + 10, "admin session 1a2b3c4d"));
  auto status = f.store.pushes().GetCommitStatus(batch).value().value();
  CHECK(status.state == "pending");
  CHECK(status.description == "queued: run " + std::to_string(dead) + " retried");
  auto row = f.Get(dead);
  CHECK(row.state == RunState::kQueued);
  CHECK(row.attempts == 0);
  CHECK(row.retries == 1);
  CHECK(row.last_error ==
        "retried by admin session 1a2b3c4d; was dead after 1 attempt(s): exit code 3: CUDA out "
        "of memory");
  auto hist = f.store.runs().Retries(dead).value();
  REQUIRE(hist.size() == 1);
  CHECK(hist[0].retried_ms == kT0 + 10);
  CHECK(hist[0].who == "admin session 1a2b3c4d");
  CHECK(hist[0].state == RunState::kDead);
  CHECK(hist[0].attempts == 1);
  CHECK(hist[0].exit_code.value() == 3);
  CHECK(hist[0].finished_ms.value() == kT0 + 5);
  CHECK(hist[0].last_error == "exit code 3: CUDA out of memory");
  // The counters follow the state.
  auto counts = f.store.runs().CountByState().value();
  CHECK(counts[static_cast<int>(RunState::kDead)] == 0);
  CHECK(counts[static_cast<int>(RunState::kQueued)] == 1);
  CHECK(f.store.runs().Batch(batch).value()->count(RunState::kQueued) == 1);
  CHECK(f.store.runs().CountActiveBatches().value() == 1);

  // Leased again with the batch's full budget: two more attempts.
  auto again = f.store.runs().Lease("w", kT0 + 11, kLease, 1).value();
  REQUIRE(again.size() == 1);
  CHECK(again[0].run_id == dead);
  CHECK(again[0].attempt == 1);
  CHECK(f.store.runs().FailRun(dead, again[0].token, kT0 + 12, "exit code 1", 1).value() ==
        RunState::kFailed);
  // Not retried while it waits for its own retry.
  CHECK_FALSE(f.store.runs().RetryRun(dead, kT0 + 13, "cli"));
  auto third = f.store.runs().Lease("w", kT0 + 100'000, kLease, 1).value();
  REQUIRE(third.size() == 1);
  CHECK(third[0].attempt == 2);
  REQUIRE(f.store.runs().Complete(dead, third[0].token, kT0 + 100'001, 0.25));
  CHECK(f.Get(dead).state == RunState::kSucceeded);
  CHECK(f.Get(dead).retries == 1);  // the history outlives the success

  // A cancelled run can be retried too; its retries add up.
  CHECK(f.store.runs().CancelRun(live, kT0 + 200'000).value() == 1);
  REQUIRE(f.store.runs().RetryRun(live, kT0 + 200'001, "cli"));
  CHECK(f.Get(live).state == RunState::kQueued);
  CHECK(f.store.runs().Retries(live).value().at(0).state == RunState::kCancelled);
  CHECK(f.store.runs().Retries(ok).value().empty());
}

TEST_CASE("Metric points keep the attempt that sent them, so a retried run's rounds are drawn "
          "apart (issue 38.8)",
          "[store][metrics]") {
  Fixture f;
  f.Submit(1);
  auto first = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  std::vector<MetricPoint> pts = {{"loss", 1.0, 0, false}, {"loss", 0.5, 1, false}};
  REQUIRE(f.store.runs().AddMetrics(first.run_id, first.token, pts, kT0));
  // Cancelled, then retried: a second attempt starts at step 0 again.
  REQUIRE(f.store.runs().CancelRun(first.run_id, kT0).value() == 1);
  // The cancelled attempt is known by its lease (its worker may still send its output).
  CHECK(f.store.runs().IsCancelledLease(first.run_id, first.token).value());
  CHECK_FALSE(f.store.runs().IsCancelledLease(first.run_id, first.token + 1).value());
  REQUIRE(f.store.runs().RetryRun(first.run_id, kT0 + 1, "admin"));
  auto second = f.store.runs().Lease("w", kT0 + 2, kLease, 1).value().at(0);
  CHECK_FALSE(f.store.runs().IsCancelledLease(first.run_id, first.token).value());
  REQUIRE(f.store.runs().AddMetrics(second.run_id, second.token, {{"loss", 0.9, 0, false}},
                                    kT0 + 3));
  std::vector<std::optional<std::int64_t>> leases;
  auto got = f.store.runs().Metrics(first.run_id, &leases).value();
  REQUIRE(got.size() == 3);
  REQUIRE(leases.size() == 3);
  CHECK(leases[0] == first.token);
  CHECK(leases[1] == first.token);
  CHECK(leases[2] == second.token);
  CHECK(second.token != first.token);
}

TEST_CASE("Metrics are stored per run in order", "[store]") {
  Fixture f;
  f.Submit(1);
  auto l = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  std::vector<MetricPoint> pts = {{"loss", 1.5, 10, false}, {"accuracy", 0.7, 10, true}};
  REQUIRE(f.store.runs().AddMetrics(l.run_id, l.token, pts, kT0));
  auto got = f.store.runs().Metrics(l.run_id).value();
  REQUIRE(got.size() == 2);
  CHECK(got[0].name == "loss");
  CHECK(got[0].step.value() == 10);
  CHECK(got[1].final);
  auto stale = f.store.runs().AddMetrics(l.run_id, l.token + 7, pts, kT0);
  REQUIRE_FALSE(stale);
  CHECK(f.store.runs().Metrics(l.run_id).value().size() == 2);
}

TEST_CASE("Batches report progress and the values of succeeded runs", "[store]") {
  Fixture f;
  auto batch = f.Submit(3);
  auto ls = f.store.runs().Lease("w", kT0, kLease, 3).value();
  REQUIRE(f.store.runs().Complete(ls[0].run_id, ls[0].token, kT0, 0.6));
  REQUIRE(f.store.runs().Complete(ls[2].run_id, ls[2].token, kT0, 0.8));
  auto b = f.store.runs().Batch(batch).value().value();
  CHECK(b.count(RunState::kSucceeded) == 2);
  CHECK(b.count(RunState::kLeased) == 1);
  CHECK(b.values == std::vector<double>{0.6, 0.8});
  CHECK(b.seeds == std::vector<std::int64_t>{1, 3});
  CHECK(b.active());
  CHECK(b.subject == "tweak lr");
  CHECK(f.store.runs().Batches(true, 0).value().size() == 1);
  REQUIRE(f.store.runs().Complete(ls[1].run_id, ls[1].token, kT0, 0.7));
  CHECK(f.store.runs().Batches(true, 0).value().empty());
  CHECK(f.store.runs().Batches(false, 0).value().size() == 1);
}

TEST_CASE("Deliveries are recorded once", "[store]") {
  Fixture f;
  DeliveryRow d{"github", "abc-123", "push", "https://x/y.git", "refs/heads/main", "0", "1"};
  CHECK(f.store.pushes().RecordDelivery(d, kT0).value());
  CHECK_FALSE(f.store.pushes().RecordDelivery(d, kT0 + 1).value());
  d.forge = "gitea";
  CHECK(f.store.pushes().RecordDelivery(d, kT0 + 2).value());
}

TEST_CASE("Machines are upserted by pool and provider id", "[store]") {
  Fixture f;
  MachineRow m;
  m.pool = "local";
  m.provider = "local";
  m.provider_id = "host:1";
  m.state = "ready";
  m.slots = 2;
  auto id = f.store.machines().UpsertMachine(m, kT0).value();
  m.slots = 4;
  CHECK(f.store.machines().UpsertMachine(m, kT0 + 1).value() == id);
  REQUIRE(f.store.machines().TouchMachine(id, kT0 + 5, "stopped"));
  CHECK(f.store.machines().List(false).value().empty());
  auto all = f.store.machines().List(true).value();
  REQUIRE(all.size() == 1);
  CHECK(all[0].slots == 4);
  CHECK(all[0].last_seen_ms == kT0 + 5);
}

TEST_CASE("A store at schema version 11 gets its counts, durations and costs from its rows",
          "[sqlite][store][migration][scale]") {
  // Schema 12's summaries are filled from the rows already there; afterwards
  // the triggers keep them, and every read agrees with a count over the rows.
  testing::TempDir dir;
  std::string path = dir / "old.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 11));
    REQUIRE(db.Exec(
        "INSERT INTO repos (url, name, created_ms) VALUES ('/r', 'r', 1);"
        "INSERT INTO commits (repo_id, sha, created_ms) VALUES (1, 'abc', 1);"
        "INSERT INTO batches (commit_id, experiment, command, metric_name, metric_goal, repeats,"
        " seed_start, timeout_s, max_attempts, created_ms) VALUES (1, 'e', 'true', 'accuracy',"
        " 'max', 4, 1, 60, 3, 1);"
        "INSERT INTO machines (pool, provider, state, slots, hourly_cost, created_ms, booted_ms,"
        " stopped_ms, last_seen_ms) VALUES ('cpu', 'fake', 'stopped', 1, 2.0, 0, 0, 3600000, 0);"
        "INSERT INTO runs (batch_id, seed, repeat, state, metric_value, started_ms, finished_ms,"
        " machine_id, created_ms, updated_ms) VALUES"
        " (1, 1, 0, 'succeeded', 0.5, 1000, 61000, 1, 1, 1),"
        " (1, 2, 1, 'succeeded', 0.6, 2000, 32000, 1, 1, 1),"
        " (1, 3, 2, 'queued', NULL, NULL, NULL, NULL, 1, 1),"
        " (1, 4, 3, 'failed', NULL, 5000, 6000, 1, 1, 1);"
        "INSERT INTO pushes (source, delivery_id, repo_url, ref, before_sha, after_sha, state,"
        " received_ms, updated_ms) VALUES ('github', 'd1', '/r', 'refs/heads/main', 'a', 'b',"
        " 'done', 1, 1);"));
  }
  auto store = Store::Open(path).value();
  CHECK(store.schema_version() == Store::kSchemaVersion);
  auto counts = store.runs().CountByState().value();
  CHECK(counts[static_cast<int>(RunState::kSucceeded)] == 2);
  CHECK(counts[static_cast<int>(RunState::kQueued)] == 1);
  CHECK(counts[static_cast<int>(RunState::kFailed)] == 1);
  auto active = store.runs().Batches(true, 0).value();
  REQUIRE(active.size() == 1);
  CHECK(active[0].count(RunState::kSucceeded) == 2);
  CHECK(active[0].count(RunState::kFailed) == 1);
  // Newest first: finished 61000 (60 s), then 32000 (30 s).
  CHECK(store.runs().RecentRunDurations(active[0].id, 20).value() == std::vector<TimeMs>{60'000, 30'000});
  auto costs = store.machines().Costs(7'200'000, false).value();
  REQUIRE(costs.size() == 1);
  CHECK(costs[0].machines == 1);
  CHECK(costs[0].billed_ms == 3'600'000);
  CHECK(costs[0].cost == Approx(2.0));
  CHECK(costs[0].busy_ms == 60'000 + 30'000 + 1'000);
  auto pushes = store.pushes().CountPushesByState().value();
  REQUIRE(pushes.size() == 1);
  CHECK(pushes[0] == std::pair<std::string, std::int64_t>{"done", 1});

  // From here the triggers keep them: the queued run and the failed one (its
  // backoff long past) are leased and fail for good; the batch is no longer
  // active.
  auto leased = store.runs().Lease("w", 10'000, 60'000, 5).value();
  REQUIRE(leased.size() == 2);
  CHECK(store.runs().CountByState().value()[static_cast<int>(RunState::kLeased)] == 2);
  for (const auto& l : leased) {
    REQUIRE(store.runs().FailRun(l.run_id, l.token, 10'001, "boom", 1, false));
  }
  CHECK(store.runs().Batches(true, 0).value().empty());
  counts = store.runs().CountByState().value();
  CHECK(counts[static_cast<int>(RunState::kDead)] == 2);
  CHECK(counts[static_cast<int>(RunState::kSucceeded)] == 2);
  CHECK(counts[static_cast<int>(RunState::kQueued)] == 0);
  CHECK(counts[static_cast<int>(RunState::kFailed)] == 0);
  CHECK(counts[static_cast<int>(RunState::kLeased)] == 0);
}

TEST_CASE("A store at schema version 1 is migrated and keeps its rows",
          "[sqlite][store][migration]") {
  testing::TempDir dir;
  std::string path = dir / "old.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 1));
    REQUIRE(db.Exec(
        "INSERT INTO repos (url, name, created_ms) VALUES ('/r', 'r', 1);"
        "INSERT INTO commits (repo_id, sha, created_ms) VALUES (1, 'abc', 1);"
        "INSERT INTO batches (commit_id, experiment, command, metric_name, metric_goal, repeats,"
        " seed_start, timeout_s, max_attempts, created_ms) VALUES (1, 'e', 'true', 'accuracy',"
        " 'max', 1, 1, 60, 3, 1);"
        "INSERT INTO runs (batch_id, seed, repeat, state, metric_value, created_ms, updated_ms)"
        " VALUES (1, 1, 0, 'succeeded', 0.5, 1, 1);"));
    auto v = db.Prepare("PRAGMA user_version").value();
    REQUIRE(v.Step().value());
    CHECK(v.Int(0) == 1);
  }
  auto store = Store::Open(path);
  REQUIRE(store);
  CHECK(store->schema_version() == Store::kSchemaVersion);
  auto b = store->runs().Batches(false, 0).value();
  REQUIRE(b.size() == 1);
  CHECK(b[0].reason.empty());  // the column added by version 2
  CHECK(b[0].values == std::vector<double>{0.5});
}

TEST_CASE("A store at schema version 7 gains pull request pushes and comments",
          "[sqlite][store][migration]") {
  testing::TempDir dir;
  std::string path = dir / "v7.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 7));
    REQUIRE(db.Exec("INSERT INTO pushes (source, delivery_id, repo_url, ref, before_sha, after_sha, "
                    "state, received_ms, updated_ms) VALUES ('github', 'd1', 'u', "
                    "'refs/heads/main', 'a', 'b', 'done', 1, 1);"));
  }
  auto store = Store::Open(path).value();
  CHECK(store.schema_version() == Store::kSchemaVersion);
  auto old = store.pushes().GetPush(1).value();
  REQUIRE(old);
  CHECK(old->pr_number == 0);  // a branch push
  CHECK(old->target_branch.empty());

  Pushes::Push pr;
  pr.source = "github";
  pr.delivery_id = "d2";
  pr.repo_url = "u";
  pr.ref = "refs/pull/3/head";
  pr.before_sha = "0000000000000000000000000000000000000000";
  pr.after_sha = "c";
  pr.pr_number = 3;
  pr.target_branch = "main";
  auto id = store.pushes().RecordPush(pr, 10).value();
  REQUIRE(id);
  CHECK(store.pushes().GetPush(*id).value()->pr_number == 3);
  CHECK(store.pushes().RefHeads("u").value().empty());  // pull refs are not branch heads
  CHECK(store.pushes().PullRequestsToRender(10).value().empty());  // not processed yet
  REQUIRE(store.pushes().FinishPush(*id, "done", "queued x", "", 11));
  auto todo = store.pushes().PullRequestsToRender(10).value();
  REQUIRE(todo.size() == 1);
  CHECK(todo[0].after_sha == "c");

  // Wanted, posted, then the same body again: nothing due; a new body: due again.
  REQUIRE(store.pushes().SetPrCommentWanted("u", 3, "c", "body 1", "h1", false, 12));
  REQUIRE(store.pushes().DuePrComments(12, 10).value().size() == 1);
  REQUIRE(store.pushes().PrCommentFailed("u", 3, "HTTP 502", 5000, false, 13));
  CHECK(store.pushes().DuePrComments(100, 10).value().empty());  // backing off
  REQUIRE(store.pushes().SetPrCommentWanted("u", 3, "c", "body 1", "h1", false, 14));
  CHECK(store.pushes().GetPrComment("u", 3).value()->attempts == 1);  // same body: backoff kept
  REQUIRE(store.pushes().PrCommentPosted("u", 3, "77", "h1", 5000));
  CHECK(store.pushes().DuePrComments(6000, 10).value().empty());
  REQUIRE(store.pushes().SetPrCommentWanted("u", 3, "c", "body 2", "h2", true, 6001));
  auto due = store.pushes().DuePrComments(6001, 10).value();
  REQUIRE(due.size() == 1);
  CHECK(due[0].comment_id == "77");
  CHECK(due[0].attempts == 0);
  CHECK(due[0].settled);
  REQUIRE(store.pushes().PrCommentPosted("u", 3, "77", "h2", 6002));
  CHECK(store.pushes().PullRequestsToRender(10).value().empty());  // settled at its head
  REQUIRE(store.pushes().ForgetPrCommentId("u", 3, 6003));
  CHECK(store.pushes().GetPrComment("u", 3).value()->comment_id.empty());
}

TEST_CASE("A store written by a newer trainq is refused, untouched", "[sqlite][store][migration]") {
  testing::TempDir dir;
  std::string path = dir / "new.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(db.Exec("CREATE TABLE future (x); PRAGMA user_version = 99;"));
  }
  auto store = Store::Open(path);
  REQUIRE_FALSE(store);
  CHECK(store.error().message.find("newer trainq") != std::string::npos);
  CHECK(store.error().message.find("new.db") != std::string::npos);
}

TEST_CASE("A file that is not a database gives a clear error", "[sqlite][store]") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "notes.db", std::string(4096, 'x')));
  auto store = Store::Open(dir / "notes.db");
  REQUIRE_FALSE(store);
  CHECK(store.error().message.find("notes.db") != std::string::npos);
  CHECK(ReadFile(dir / "notes.db").value() == std::string(4096, 'x'));
}

TEST_CASE("A missing database is not created when asked not to", "[sqlite][store]") {
  testing::TempDir dir;
  StoreOptions o;
  o.create = false;
  auto store = Store::Open(dir / "missing.db", o);
  REQUIRE_FALSE(store);
  CHECK(store.error().kind == ErrorKind::kNotFound);
  CHECK(store.error().message.find("missing.db") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "missing.db"));
}

TEST_CASE("A locked database makes writes fail cleanly after the busy timeout", "[store]") {
  Fixture f;
  f.Submit(2);
  StoreOptions o;
  o.busy_timeout_ms = 50;
  auto second = Store::Open(f.path, o).value();
  // The first connection holds the write lock.
  auto locker = sql::Db::Open(f.path, false, 50).value();
  REQUIRE(locker.BeginWrite());  // BEGIN IMMEDIATE (PostgreSQL: the write lock)
  auto r = second.runs().Lease("w", kT0, kLease, 1);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kUnavailable);
  CHECK(r.error().retryable());
  CHECK(r.error().message.find("lock") != std::string::npos);
  // Readers still work under WAL.
  CHECK(second.runs().CountByState().value()[static_cast<int>(RunState::kQueued)] == 2);
  REQUIRE(locker.Exec("ROLLBACK"));
  CHECK(second.runs().Lease("w", kT0, kLease, 1).value().size() == 1);
}

// Issue 16: a stall or a coordinator crash turned a run whose command
// succeeded into `dead` (max_attempts 1).
TEST_CASE("A success reported after the lease expired counts when nobody else holds the run",
          "[store]") {
  Fixture f;
  f.Submit(1, 1);
  auto l = f.store.runs().Lease("w", kT0, kLease, 1).value().at(0);
  CHECK(f.store.runs().ExpireLeases(kT0 + kLease + 1).value() == 1);
  CHECK(f.Get(l.run_id).state == RunState::kDead);
  // The worker was stopped (SIGSTOP) past its lease; its command had succeeded.
  REQUIRE(f.store.runs().Complete(l.run_id, l.token, kT0 + kLease + 2, 0.8));
  auto row = f.Get(l.run_id);
  CHECK(row.state == RunState::kSucceeded);
  CHECK(row.metric_value.value() == Approx(0.8));
  CHECK(row.attempts == 1);
}

TEST_CASE("A success for a run another holder already completed is refused, naming that",
          "[store]") {
  Fixture f;
  f.Submit(1, 3);
  auto old = f.store.runs().Lease("w1", kT0, kLease, 1).value().at(0);
  CHECK(f.store.runs().ExpireLeases(kT0 + kLease + 1).value() == 1);
  TimeMs later = kT0 + kLease + 1 + f.store.BackoffMs(1);
  auto fresh = f.store.runs().Lease("w2", later, kLease, 1).value().at(0);
  REQUIRE(f.store.runs().Complete(fresh.run_id, fresh.token, later + 1, 0.7));
  auto late = f.store.runs().Complete(old.run_id, old.token, later + 2, 0.9);
  REQUIRE_FALSE(late);
  CHECK(late.error().kind == ErrorKind::kConflict);
  CHECK(late.error().message.find("already completed") != std::string::npos);
  CHECK(f.Get(old.run_id).metric_value.value() == Approx(0.7));  // counted once
}

TEST_CASE("A lease that expired while serve was down gets one more lease, its later expiry "
          "uses no attempt, and a heartbeat makes the worker answerable again",
          "[store]") {
  Fixture f;
  f.Submit(2, 1);
  auto leases = f.store.runs().Lease("w", kT0, kLease, 2).value();
  REQUIRE(leases.size() == 2);
  // serve restarts long after both leases ran out.
  TimeMs restart = kT0 + 10 * kLease;
  CHECK(f.store.runs().GraceLeases(restart, restart, kLease, "trainq serve was down").value() == 2);
  CHECK(f.store.runs().ExpireLeases(restart + 1).value() == 0);  // renewed
  // One worker comes back and heartbeats; the other never does.
  REQUIRE(f.store.runs().Heartbeat(leases[0].run_id, leases[0].token, restart + 1'000, kLease));
  CHECK(f.store.runs().ExpireLeases(restart + kLease + 1).value() == 1);
  auto gone = f.Get(leases[1].run_id);
  CHECK(gone.state == RunState::kQueued);  // not dead, although max_attempts is 1
  CHECK(gone.attempts == 0);
  CHECK(gone.last_error.find("trainq serve was away") != std::string::npos);
  // The one that came back is the worker's own again: its silence counts.
  CHECK(f.store.runs().ExpireLeases(restart + 1'000 + kLease + 1).value() == 1);
  CHECK(f.Get(leases[0].run_id).state == RunState::kDead);
  // Leases still valid are not touched.
  auto again = f.store.runs().Lease("w", restart + 2 * kLease, kLease, 1).value();
  REQUIRE(again.size() == 1);
  CHECK(f.store.runs().GraceLeases(restart + 2 * kLease, restart + 2 * kLease, kLease, "x").value() == 0);
}

// Found by ci/faults: four `trainq submit` creating the same new database at
// once raced in the migrations ("duplicate column name").
TEST_CASE("Processes that open a new database at once migrate it once", "[store]") {
  testing::TempDir dir;
  std::string path = dir / "trainq.db";
  std::vector<std::thread> threads;
  std::vector<std::string> errors(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto s = Store::Open(path);
      if (!s) errors[i] = s.error().message;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e == "");
  auto s = Store::Open(path);
  REQUIRE(s);
  CHECK(s->schema_version() == Store::kSchemaVersion);
}

TEST_CASE("A lease carries the batch's env_passthrough from its spec, or none when not written",
          "[store][env]") {
  Fixture f;
  BatchSpec narrowed = MakeSpec("narrowed", 1);
  narrowed.spec_json = R"({"command": "x", "env_passthrough": ["WANDB_API_KEY", "HF_*"]})";
  BatchSpec empty = MakeSpec("empty", 1);
  empty.spec_json = R"({"env_passthrough": []})";
  BatchSpec plain = MakeSpec("plain", 1);
  REQUIRE(f.store.runs().Submit("/repos/demo", MakeCommit(), {narrowed, empty, plain}, kT0));
  auto leased = f.store.runs().Lease("w1", kT0, kLease, 3);
  REQUIRE(leased);
  REQUIRE(leased->size() == 3);
  for (const auto& l : *leased) {
    INFO(l.experiment);
    if (l.experiment == "narrowed") {
      REQUIRE(l.env_passthrough);
      CHECK(*l.env_passthrough == std::vector<std::string>{"WANDB_API_KEY", "HF_*"});
    } else if (l.experiment == "empty") {
      REQUIRE(l.env_passthrough);
      CHECK(l.env_passthrough->empty());
    } else {
      CHECK_FALSE(l.env_passthrough);
    }
  }
}

namespace {

std::int64_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? -1 : static_cast<std::int64_t>(n);
}

}  // namespace

TEST_CASE("An existing file that holds no queue is refused, never initialised, except by "
          "initialize_existing (trainq init)",
          "[sqlite][store][init]") {
  testing::TempDir dir;
  const std::string path = dir / "q.db";
  REQUIRE(WriteFile(path, ""));  // emptied by a bad restore or a cut copy
  for (bool create : {true, false}) {
    StoreOptions o;
    o.create = create;
    auto s = Store::Open(path, o);
    REQUIRE_FALSE(s);
    CHECK(s.error().kind == ErrorKind::kInvalidArgument);
    CHECK_THAT(s.error().message, Catch::Contains(path + ": the file exists but holds no "
                                                         "trainq queue (0 bytes)"));
    CHECK_THAT(s.error().message, Catch::Contains("trainq --db " + path + " init"));
    CHECK(FileSize(path) == 0);
    CHECK_FALSE(std::filesystem::exists(path + "-wal"));
  }
  StoreOptions init;
  init.initialize_existing = true;
  auto s = Store::Open(path, init);
  REQUIRE(s);
  CHECK(s->schema_version() == Store::kSchemaVersion);
  // A missing file is still created where creating is allowed (the first
  // submit or serve).
  auto fresh = Store::Open(dir / "new.db");
  REQUIRE(fresh);
  CHECK(fresh->schema_version() == Store::kSchemaVersion);
}

TEST_CASE("QuickCheck says ok for a sound store", "[store]") {
  Fixture f;
  f.Submit(3);
  auto check = f.store.QuickCheck();
  REQUIRE(check);
  CHECK(*check == std::vector<std::string>{"ok"});
}

TEST_CASE("Seeds that would pass INT64_MAX are refused, not wrapped", "[store]") {
  Fixture f;
  auto spec = MakeSpec("big", 2, 3);
  spec.seed_start = std::numeric_limits<std::int64_t>::max();
  auto r = f.store.runs().Submit("/repos/demo", MakeCommit(), {spec}, kT0);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kInvalidArgument);
  CHECK_THAT(r.error().message, Catch::Contains("largest 64-bit integer"));
  spec.repeats = 1;  // the largest seed itself is fine
  REQUIRE(f.store.runs().Submit("/repos/demo", MakeCommit(), {spec}, kT0));
}

TEST_CASE("InspectWal finds the committed transactions SQLite drops after a damaged WAL frame",
          "[sqlite][store][wal]") {
  testing::TempDir dir;
  const std::string live = dir / "live.db";
  auto db = sql::Db::Open(live, true, 1000).value();
  REQUIRE(db.Exec("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; "
                  "PRAGMA synchronous=FULL; CREATE TABLE t (x BLOB);"));
  for (int i = 0; i < 8; ++i) REQUIRE(db.Exec("INSERT INTO t VALUES (randomblob(500))"));
  // What a crash leaves: the main file and the WAL, nothing checkpointed.
  auto crash = [&](const std::string& name) {
    const std::string p = dir / name;
    std::filesystem::copy_file(live, p);
    std::filesystem::copy_file(live + "-wal", p + "-wal");
    return p;
  };
  const std::string intact = crash("intact.db");
  auto w = InspectWal(intact).value();
  CHECK(w.present);
  CHECK(w.header_ok);
  CHECK(w.commits == 9);  // CREATE TABLE and 8 inserts
  CHECK(w.replayed == w.frames);
  CHECK(w.lost_commits == 0);
  CHECK(w.Problem(intact + "-wal").empty());

  // One byte of a frame in the middle flipped: SQLite keeps what is before it
  // and drops the rest without a word; InspectWal names it.
  const std::string damaged = crash("damaged.db");
  const std::int64_t frame = 4096 + 24;
  const std::int64_t k = w.frames / 2;
  {
    std::fstream f(damaged + "-wal", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(32 + k * frame + 24 + 200);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(32 + k * frame + 24 + 200);
    f.write(&c, 1);
  }
  auto d = InspectWal(damaged).value();
  CHECK(d.bad_frame == k + 1);
  CHECK(d.lost_commits > 0);
  CHECK(d.commits + d.lost_commits <= 9);
  const std::string problem = d.Problem(damaged + "-wal");
  CHECK_THAT(problem, Catch::Contains("frame " + std::to_string(k + 1) + " of "));
  CHECK_THAT(problem, Catch::Contains("drops " + std::to_string(d.lost_commits) +
                                      " committed transaction(s)"));
  // What SQLite then reads agrees: the rows of the dropped commits are gone.
  auto reread = sql::Db::Open(damaged, false, 1000).value();
  auto count = reread.Prepare("SELECT count(*) FROM t").value();
  REQUIRE(count.Step().value());
  CHECK(count.Int(0) == 8 - d.lost_commits);

  // A damaged header: the whole WAL is ignored, and said so.
  const std::string headless = crash("headless.db");
  {
    std::fstream f(headless + "-wal", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16);
    f.write("XXXX", 4);  // salt-1: the header checksum fails
  }
  auto h = InspectWal(headless).value();
  CHECK(h.present);
  CHECK_FALSE(h.header_ok);
  CHECK_THAT(h.Problem(headless + "-wal"), Catch::Contains("header is damaged"));
  // No WAL at all: nothing to say.
  CHECK_FALSE(InspectWal(dir / "none.db").value().present);
}

TEST_CASE("A batch that reuses another has that batch's runs as its own and queues nothing",
          "[store][reuse]") {
  Fixture f;
  std::int64_t source = f.Submit(3);
  auto leased = f.store.runs().Lease("w", kT0, kLease, 3).value();
  REQUIRE(leased.size() == 3);
  for (const auto& l : leased) {
    REQUIRE(f.store.runs().MarkRunning(l.run_id, l.token, kT0, ""));
    REQUIRE(f.store.runs().Complete(l.run_id, l.token, kT0 + 1, 0.25 * static_cast<double>(l.seed)));
  }
  CommitInfo next = MakeCommit("cccccccccccccccccccccccccccccccccccccccc");
  next.parent_sha = MakeCommit().sha;
  auto r = f.store.runs().ReuseBatch("/repos/demo", next, "mlp", source, "same inputs", kT0 + 2);
  REQUIRE(r);
  CHECK(r->created);
  REQUIRE(r->reuses_batch_id);
  CHECK(*r->reuses_batch_id == source);
  CHECK(r->batch_id != source);

  auto b = f.store.runs().Batch(r->batch_id).value().value();
  CHECK(b.sha == next.sha);
  CHECK(b.reuses_batch_id == source);
  CHECK(b.reused_from_sha == MakeCommit().sha);
  CHECK(b.count(RunState::kSucceeded) == 3);
  CHECK(b.values == std::vector<double>{0.25, 0.5, 0.75});
  CHECK(b.seed_start == 1);
  CHECK(f.store.runs().Runs(r->batch_id, std::nullopt, 0).value().size() == 3);

  // A reuse of the reusing batch points at the one with the runs.
  CommitInfo third = MakeCommit("dddddddddddddddddddddddddddddddddddddddd");
  auto r2 = f.store.runs().ReuseBatch("/repos/demo", third, "mlp", r->batch_id, "same", kT0 + 3);
  REQUIRE(r2);
  CHECK(r2->reuses_batch_id == source);

  // Submit keeps it as it is: nothing queued, no runs of its own.
  auto again = f.store.runs().Submit("/repos/demo", next, {MakeSpec("mlp", 3)}, kT0 + 4).value();
  REQUIRE(again.size() == 1);
  CHECK(again[0].batch_id == r->batch_id);
  CHECK(again[0].runs_added == 0);
  CHECK(again[0].reuses_batch_id == source);
  CHECK(f.store.runs().Runs(std::nullopt, std::nullopt, 0).value().size() == 3);

  // Growing it grows the batch with the runs.
  CHECK(f.store.runs().ExtendBatch(r->batch_id, 4, kT0 + 5).value() == 1);
  CHECK(f.store.runs().Runs(source, std::nullopt, 0).value().size() == 4);

  // --rerun: it stops reusing, and the next Submit queues its own seeds.
  CHECK(f.store.runs().StopReusing(r->batch_id).value());
  CHECK_FALSE(f.store.runs().StopReusing(r->batch_id).value());
  auto own = f.store.runs().Submit("/repos/demo", next, {MakeSpec("mlp", 3)}, kT0 + 6).value();
  CHECK(own[0].runs_added == 3);
  auto mine = f.store.runs().Batch(r->batch_id).value().value();
  CHECK_FALSE(mine.reuses_batch_id);
  CHECK(mine.count(RunState::kQueued) == 3);
}

TEST_CASE("Quiet commits are found by prefix, and a push's statuses are one per context",
          "[store][reuse]") {
  Fixture f;
  Pushes::Push p;
  p.source = "github";
  p.delivery_id = "d1";
  p.repo_url = "https://example.com/r.git";
  p.ref = "refs/heads/main";
  p.before_sha = std::string(40, 'b');
  p.after_sha = std::string(40, 'e');
  auto id = f.store.pushes().RecordPush(p, kT0).value().value();
  REQUIRE(f.store.pushes().AddQuietCommit({p.repo_url, p.after_sha, id, "nothing changed"}, kT0));
  REQUIRE(f.store.pushes().AddQuietCommit({p.repo_url, p.after_sha, id, "again"}, kT0));  // kept as first
  auto q = f.store.pushes().QuietCommits("eeee").value();
  REQUIRE(q.size() == 1);
  CHECK(q[0].note == "nothing changed");
  CHECK(f.store.pushes().QuietCommits("ffff").value().empty());
  CHECK_FALSE(f.store.pushes().QuietCommits("zz12"));

  for (std::string ctx : {"trainq/a", "trainq/b"}) {
    Pushes::CommitStatus s;
    s.push_id = id;
    s.repo_url = p.repo_url;
    s.sha = p.after_sha;
    s.context = ctx;
    s.state = "success";
    s.description = "no experiment changed";
    REQUIRE(f.store.pushes().AddPushStatus(s, kT0));
  }
  auto due = f.store.pushes().DueCommitStatuses(kT0, 10).value();
  REQUIRE(due.size() == 2);
  // Posting one leaves the other due.
  REQUIRE(f.store.pushes().CommitStatusPosted(due[0], "success", "no experiment changed", kT0 + 1));
  auto left = f.store.pushes().DueCommitStatuses(kT0 + 1, 10).value();
  REQUIRE(left.size() == 1);
  CHECK(left[0].context != due[0].context);
  auto all = f.store.pushes().GetPushStatuses(id).value();
  REQUIRE(all.size() == 2);
  CHECK(all[0].context == "trainq/a");
}

TEST_CASE("A store at schema version 13 keeps its batch and push statuses in the one status table",
          "[sqlite][store][migration]") {
  testing::TempDir dir;
  std::string path = dir / "v13.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 13));
    REQUIRE(db.Exec(
        "INSERT INTO repos (id, url, name, created_ms) VALUES (1, 'u', 'u', 1);"
        "INSERT INTO commits (id, repo_id, sha, created_ms) VALUES (1, 1, 'abc', 1);"
        "INSERT INTO batches (id, commit_id, experiment, command, metric_name, metric_goal, "
        "repeats, seed_start, timeout_s, max_attempts, created_ms) VALUES (1, 1, 'e', 'true', "
        "'m', 'min', 1, 1, 60, 1, 1);"
        "INSERT INTO commit_statuses (batch_id, repo_url, sha, context, state, description, "
        "posted_state, posted_description, attempts, not_before_ms, gave_up, last_error, "
        "updated_ms) VALUES (1, 'u', 'abc', 'trainq/e', 'success', 'better', 'pending', "
        "'queued', 2, 5, 0, 'forge down', 1);"
        "INSERT INTO pushes (id, source, delivery_id, repo_url, ref, before_sha, after_sha, "
        "state, received_ms, updated_ms) VALUES (1, 'github', 'd1', 'u', 'refs/heads/main', "
        "'a', 'def', 'done', 1, 1);"
        "INSERT INTO push_statuses (push_id, repo_url, sha, context, state, description, "
        "updated_ms) VALUES (1, 'u', 'def', 'trainq/b', 'success', 'nothing to judge', 1);"
        "INSERT INTO push_statuses (push_id, repo_url, sha, context, state, description, "
        "updated_ms) VALUES (1, 'u', 'def', 'trainq/a', 'success', 'nothing to judge', 1);"));
  }
  auto store = Store::Open(path).value();
  CHECK(store.schema_version() == Store::kSchemaVersion);
  auto batch = store.pushes().GetCommitStatus(1).value();
  REQUIRE(batch);
  CHECK(batch->batch_id == 1);
  CHECK(batch->push_id == 0);
  CHECK(batch->state == "success");
  CHECK(batch->posted_state == "pending");
  CHECK(batch->posted_description == "queued");
  CHECK(batch->attempts == 2);
  CHECK(batch->last_error == "forge down");
  auto pushed = store.pushes().GetPushStatuses(1).value();
  REQUIRE(pushed.size() == 2);
  CHECK(pushed[0].context == "trainq/a");
  CHECK(pushed[1].context == "trainq/b");
  CHECK(pushed[0].push_id == 1);
  CHECK(pushed[0].batch_id == 0);
  CHECK(store.pushes().GetPushStatus(1).value()->context == "trainq/a");
  // Both kinds are due from the one table, by not_before_ms: the pushes' (0)
  // before the batch's (5).
  auto due = store.pushes().DueCommitStatuses(kT0, 10).value();
  REQUIRE(due.size() == 3);
  CHECK(due[0].push_id == 1);
  CHECK(due[2].batch_id == 1);
  // The old tables are gone.
  auto db = sql::Db::Open(path, false, 1000).value();
  auto q = db.Prepare("SELECT count(*) FROM sqlite_master WHERE name IN ('commit_statuses', "
                      "'push_statuses')")
               .value();
  REQUIRE(q.Step().value());
  CHECK(q.Int(0) == 0);
}

TEST_CASE("A relaxed write transaction commits, rolls back and joins like any other", "[store]") {
  Fixture f;
  f.Submit(2);
  auto leased = f.store.runs().Lease("w", kT0, 60'000, 2).value();
  REQUIRE(leased.size() == 2);
  // Committed: another connection sees the new expiry.
  TimeMs expires = 0;
  REQUIRE(f.store.InRelaxedWriteTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(expires, f.store.runs().Heartbeat(leased[0].run_id, leased[0].token,
                                                       kT0 + 5'000, 60'000));
    return Status{};
  }));
  CHECK(expires == kT0 + 65'000);
  auto other = Store::Open(f.path).value();
  auto raw = sql::Db::Open(f.path, false, 5000).value();
  auto expiry = [&](std::int64_t run) {
    auto q = raw.Prepare("SELECT lease_expires_ms FROM runs WHERE id = ?").value();
    q.Bind(1, run);
    REQUIRE(q.Step().value());
    return q.Int(0);
  };
  CHECK(expiry(leased[0].run_id) == kT0 + 65'000);
  // A failing fn rolls back what it wrote.
  auto failed = f.store.InRelaxedWriteTransaction([&]() -> Status {
    TRY(f.store.runs().Heartbeat(leased[1].run_id, leased[1].token, kT0 + 9'000, 60'000));
    return Fail(ErrorKind::kConflict, "no");
  });
  CHECK_FALSE(failed);
  CHECK(expiry(leased[1].run_id) == kT0 + 60'000);
  // Inside an ordinary transaction it joins it: one commit for both.
  REQUIRE(f.store.InWriteTransaction([&]() -> Status {
    return f.store.InRelaxedWriteTransaction([&]() -> Status {
      TRY(f.store.runs().Heartbeat(leased[1].run_id, leased[1].token, kT0 + 9'000, 60'000));
      return Status{};
    });
  }));
  CHECK(expiry(leased[1].run_id) == kT0 + 69'000);
  // And ordinary commits after it still work (synchronous back to FULL).
  REQUIRE(f.store.runs().Complete(leased[0].run_id, leased[0].token, kT0 + 10'000, 0.5));
  CHECK(other.runs().Run(leased[0].run_id).value()->state == RunState::kSucceeded);
}

namespace {

std::vector<std::int64_t> WaitingIds(Store& store, const std::string& repo, const std::string& ref) {
  std::vector<std::int64_t> out;
  auto batches = store.runs().WaitingBatchesOfRef(repo, ref).value();
  for (const auto& b : batches) out.push_back(b.id);
  return out;
}

}  // namespace

TEST_CASE("WaitingBatchesOfRef lists a ref's own batches with waiting runs, not those another "
          "ref reuses or compares with",
          "[store][coalesce]") {
  Fixture f;
  const std::string repo = "/repos/demo";
  const std::string feature = "refs/heads/feature";
  auto at = [&](char c) { return MakeCommit(std::string(40, c)); };
  auto submit = [&](char c, const std::string& ref) {
    auto r = f.store.runs().Submit(repo, at(c), {MakeSpec()}, kT0, ref);
    REQUIRE(r);
    return r->front().batch_id;
  };
  std::int64_t b1 = submit('1', feature);
  std::int64_t b2 = submit('2', feature);
  std::int64_t by_hand = submit('3', "");
  std::int64_t on_main = submit('4', "refs/heads/main");
  CHECK(WaitingIds(f.store, repo, feature) == std::vector<std::int64_t>{b1, b2});
  CHECK(WaitingIds(f.store, repo, "refs/heads/main") == std::vector<std::int64_t>{on_main});
  CHECK(WaitingIds(f.store, "/repos/other", feature).empty());
  (void)by_hand;
  // The first ref keeps the batch: a later submission of it from another ref
  // changes nothing.
  submit('1', "refs/pull/1/head");
  CHECK(WaitingIds(f.store, repo, "refs/pull/1/head").empty());
  // Compared with by main's batch: kept out. By a batch of its own ref: not.
  REQUIRE(f.store.runs().SetBaseline(on_main, std::string(40, '1'), b1, "note"));
  REQUIRE(f.store.runs().SetBaseline(b2, std::string(40, '1'), b1, "note"));
  CHECK(WaitingIds(f.store, repo, feature) == std::vector<std::int64_t>{b2});
  // Reused by a batch without a ref: kept out.
  REQUIRE(f.store.runs().ReuseBatch(repo, at('5'), "mlp", b2, "same inputs", kT0));
  CHECK(WaitingIds(f.store, repo, feature).empty());
  // Runs that all ended: nothing waits.
  std::int64_t b6 = submit('6', feature);
  CHECK(WaitingIds(f.store, repo, feature) == std::vector<std::int64_t>{b6});
  REQUIRE(f.store.runs().CancelBatch(b6, kT0));
  CHECK(WaitingIds(f.store, repo, feature).empty());
}

TEST_CASE("A store at schema version 17 keeps its batches, with no ref: coalescing never "
          "cancels them",
          "[sqlite][store][migration][coalesce]") {
  testing::TempDir dir;
  std::string path = dir / "v17.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 17));
    REQUIRE(db.Exec(
        "INSERT INTO repos (id, url, name, created_ms) VALUES (1, '/repos/demo', 'demo', 1);"
        "INSERT INTO commits (id, repo_id, sha, created_ms) VALUES (1, 1, 'abc', 1);"
        "INSERT INTO batches (id, commit_id, experiment, command, metric_name, metric_goal, "
        "repeats, seed_start, timeout_s, max_attempts, created_ms) VALUES (1, 1, 'e', 'true', "
        "'m', 'min', 1, 1, 60, 1, 1);"
        "INSERT INTO runs (batch_id, seed, repeat, state, created_ms, updated_ms) "
        "VALUES (1, 1, 0, 'queued', 1, 1);"));
  }
  auto store = Store::Open(path).value();
  CHECK(store.schema_version() == Store::kSchemaVersion);
  auto b = store.runs().Batch(1).value();
  REQUIRE(b);
  CHECK(b->count(RunState::kQueued) == 1);
  CHECK(WaitingIds(store, "/repos/demo", "refs/heads/main").empty());
  CHECK(WaitingIds(store, "/repos/demo", "").empty());
}
