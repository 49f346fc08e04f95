// Choosing a batch's baseline over a real git history.
#include "agent/results/baseline.h"
#include "agent/results/submit.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>

#include "agent/results/analysis.h"
#include "agent/repo/git_repo.h"
#include "tests/support/git_cli.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

const char* kManifest = R"(version: 1
defaults:
  repeats: 3
experiments:
  x:
    command: echo x {seed}
    watch: [x/**]
  y:
    command: echo y {seed}
    watch: [y/**]
)";

struct History {
  testing::TempDir tmp;
  testing::GitCli git{tmp / "repo"};
  Store store = Store::Open(tmp / "t.db").value();

  // Submits `experiment` at `sha` with seeds seed..seed+n-1 and completes it.
  std::int64_t Ran(const std::string& sha, const std::string& experiment, int n = 3,
                   int seed = 1, bool finish = true) {
    auto repo = GitRepo::Open(git.dir()).value();
    auto info = repo.Resolve(sha).value();
    BatchSpec s;
    s.experiment = experiment;
    s.command = "true";
    s.repeats = n;
    s.seed_start = seed;
    auto r = store.runs().Submit(repo.location(), info, {s}, kT0).value();
    if (finish) {
      auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
      for (const auto& l : leased) {
        auto done = store.runs().Complete(l.run_id, l.token, kT0, 0.5 + 0.01 * l.repeat);
        INFO((done ? std::string() : done.error().message));
        REQUIRE(done);
      }
    }
    return r.front().batch_id;
  }
  BatchProgress Batch(std::int64_t id) { return store.runs().Batch(id).value().value(); }
  GitRepo& Repo() {
    if (!repo) repo.emplace(GitRepo::Open(git.dir()).value());
    return *repo;
  }
  std::optional<GitRepo> repo;
};

}  // namespace

TEST_CASE("baseline: a batch at the base is used as it is", "[baseline]") {
  History h;
  std::string a = h.git.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string c = h.git.Commit({{"x/a", "2"}}, "C");
  auto base = h.Ran(a, "x");
  auto head = h.Ran(c, "x");
  auto note = ChooseBaseline(h.store, h.Repo(), h.Batch(head), a, kT0);
  REQUIRE(note);
  CHECK(*note == "batch " + std::to_string(base) + " at the base " + a.substr(0, 7));
  CHECK(h.Batch(head).baseline_batch_id == base);
  CHECK(ParentBatch(h.store, h.Batch(head)).value()->id == base);
}

TEST_CASE("baseline: commits that did not touch the experiment are skipped", "[baseline]") {
  History h;
  std::string a = h.git.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}, {"y/a", "1"}}, "A");
  std::string b1 = h.git.Commit({{"README.md", "docs"}}, "B1: docs");
  std::string b2 = h.git.Commit({{"y/a", "2"}}, "B2: only y");
  std::string c = h.git.Commit({{"x/a", "2"}}, "C");
  auto at_a = h.Ran(a, "x");
  auto head = h.Ran(c, "x");
  auto note = ChooseBaseline(h.store, h.Repo(), h.Batch(head), b2, kT0);
  REQUIRE(note);
  CHECK(*note == "batch " + std::to_string(at_a) + " at " + a.substr(0, 7) +
                     ", 2 commits before the base " + b2.substr(0, 7) + " with the same inputs");
  CHECK(h.Batch(head).baseline_batch_id == at_a);
  CHECK(h.store.runs().Batches(false, 0).value().size() == 2);  // nothing queued
  (void)b1;
}

TEST_CASE("baseline: a commit that changed the experiment stops the walk, the baseline is "
          "queued at the base with the head's seeds",
          "[baseline]") {
  History h;
  std::string a = h.git.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string b = h.git.Commit({{"x/a", "2"}}, "B: changes x");
  std::string c = h.git.Commit({{"x/a", "3"}}, "C");
  h.Ran(a, "x");  // before the change at B: not equivalent to B
  auto head = h.Ran(c, "x", 4, /*seed=*/7);
  auto note = ChooseBaseline(h.store, h.Repo(), h.Batch(head), b, kT0);
  REQUIRE(note);
  auto chosen = h.Batch(head).baseline_batch_id;
  REQUIRE(chosen);
  auto queued = h.Batch(*chosen);
  CHECK(queued.sha == b);
  CHECK(queued.repeats == 4);
  CHECK(queued.seed_start == 7);
  CHECK(*note == "batch " + std::to_string(*chosen) + " queued at the base " + b.substr(0, 7) +
                     " with the same seeds");
  auto runs = h.store.runs().Runs(*chosen, std::nullopt, 0).value();
  REQUIRE(runs.size() == 4);
  CHECK(runs.front().seed == 7);
  CHECK(runs.back().seed == 10);
}

TEST_CASE("baseline: reuse and off queue nothing, a new experiment has none", "[baseline]") {
  History h;
  std::string a = h.git.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string c = h.git.Commit({{"x/a", "2"}}, "C");
  auto head = h.Ran(c, "x");
  BaselineOptions reuse;
  reuse.queue_missing = false;
  auto note = ChooseBaseline(h.store, h.Repo(), h.Batch(head), a, kT0, reuse);
  REQUIRE(note);
  CHECK(note->starts_with("no batch of x at the base " + a.substr(0, 7)));
  CHECK(h.store.runs().Batches(false, 0).value().size() == 1);
  CHECK_FALSE(h.Batch(head).baseline_batch_id);

  std::string with_z = std::string(kManifest) + "  z:\n    command: echo z\n";
  std::string d = h.git.Commit({{"trainq.yaml", with_z}}, "D: adds z");
  auto z = h.Ran(d, "z");
  note = ChooseBaseline(h.store, h.Repo(), h.Batch(z), c, kT0);
  REQUIRE(note);
  CHECK(*note == "new experiment: the base " + c.substr(0, 7) + " does not define z");
}

TEST_CASE("CompareBatches pairs on the shared seeds after a top-up", "[baseline][analysis]") {
  BatchProgress a, b;
  a.metric_name = b.metric_name = "accuracy";
  a.metric_goal = b.metric_goal = "max";
  for (int s = 1; s <= 12; ++s) {
    b.seeds.push_back(s);
    b.values.push_back(0.6 + 0.02 * (s % 5) + 0.001 * (s % 3));
  }
  for (int s = 1; s <= 10; ++s) {
    a.seeds.push_back(s);
    a.values.push_back(0.6 + 0.02 * (s % 5) + 0.004 + 0.001 * (s % 2));
  }
  a.counts[static_cast<int>(RunState::kSucceeded)] = 10;
  b.counts[static_cast<int>(RunState::kSucceeded)] = 12;
  auto c = CompareBatches(a, b);
  CHECK(c.paired);
  CHECK(c.shared_seeds == 10);
  CHECK(c.verdict == stats::Verdict::kBetter);
  CHECK(ComparisonText(c).find("paired t on 10 shared seeds, p") != std::string::npos);
}

namespace trainq {
namespace {

TEST_CASE("drift: a batch that reuses another's runs is not tested against them, nor counted twice",
          "[baseline][drift][reuse]") {
  History h;
  std::string a = h.git.Commit({{"x/a", "1\n"}}, "a");
  std::string b = h.git.Commit({{"README", "hi\n"}}, "docs");
  std::string c = h.git.Commit({{"README", "hi again\n"}}, "docs 2");
  auto repo = GitRepo::Open(h.git.dir()).value();
  BatchSpec s;
  s.experiment = "x";
  s.command = "true";
  s.repeats = 3;
  s.spec_json = R"({"inputs": "same"})";
  auto run_all = [&](double shift) {
    auto leased = h.store.runs().Lease("w", kT0, 60'000, 100).value();
    for (const auto& l : leased) {
      auto done = h.store.runs().Complete(l.run_id, l.token, kT0, 0.5 + shift + 0.01 * l.repeat);
      INFO((done ? std::string() : done.error().message));
      REQUIRE(done);
    }
  };
  auto first = h.store.runs().Submit(repo.location(), repo.Resolve(a).value(), {s}, kT0).value();
  run_all(0);
  auto reused = h.store.runs().ReuseBatch(repo.location(), repo.Resolve(b).value(), "x",
                                   first.front().batch_id, "same inputs", kT0 + 1);
  REQUIRE(reused);
  auto rb = h.Batch(reused->batch_id);
  REQUIRE(rb.reuses_batch_id);
  // Its runs are batch `first`'s: nothing to test them against.
  CHECK_FALSE(DriftOf(h.store, rb).value());
  // A later batch of the same inputs with runs of its own is tested against
  // the one earlier batch that ran, not against the reuse as well.
  auto third = h.store.runs().Submit(repo.location(), repo.Resolve(c).value(), {s}, kT0 + 2).value();
  run_all(0.1);
  auto d = DriftOf(h.store, h.Batch(third.front().batch_id)).value();
  REQUIRE(d);
  INFO(d->text);
  CHECK(d->drift);
  CHECK(d->text.find("against 1 earlier batch ") != std::string::npos);
}

}  // namespace
}  // namespace trainq
