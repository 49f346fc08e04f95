// The one submit path (agent/results/submit.h) over a real git history and a
// real store: what `trainq submit` and a push both go through.
#include "agent/results/submit.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/gate.h"
#include "queue/run_queue.h"
#include "queue/store.h"
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
    determinism: check
)";

struct Repo {
  testing::TempDir tmp;
  testing::GitCli cli{tmp / "repo"};
  Store store = Store::Open(tmp / "t.db").value();
  std::optional<GitRepo> git;

  GitRepo& Git() {
    if (!git) git.emplace(GitRepo::Open(cli.dir()).value());
    return *git;
  }
  // x's spec at `sha`, with its inputs' fingerprint, as both callers build it.
  SubmitRequest Request(const std::string& sha, std::string base) {
    SubmitRequest req;
    req.commit = Git().Resolve(sha).value();
    auto manifest = ParseManifest(Git().ReadFile(sha, "trainq.yaml").value(), "trainq.yaml").value();
    req.specs = {manifest.Find("x")->ToBatchSpec("test")};
    REQUIRE(AddInputsFingerprints(Git(), sha, manifest, req.specs));
    req.base_sha = std::move(base);
    return req;
  }
  // Runs every queued run to success.
  void Finish() {
    auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
    for (const auto& l : leased) REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, 0.5));
  }
  std::int64_t BatchCount() { return static_cast<std::int64_t>(store.runs().Batches(false, 0).value().size()); }
};

}  // namespace

TEST_CASE("submit: a commit with the inputs of an ancestor's batch reuses it, and queues no "
          "determinism companion for it",
          "[submit]") {
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string b = r.cli.Commit({{"README.md", "docs"}}, "B: docs only");

  auto first = SubmitCommit(r.store, r.Git(), r.Request(a, ""), kT0);
  REQUIRE(first);
  // x and its determinism companion x@repro, both queued.
  REQUIRE(first->size() == 2);
  CHECK((*first)[0].result.experiment == "x");
  CHECK((*first)[0].result.created);
  CHECK((*first)[1].result.experiment == std::string("x") + std::string(kReproSuffix));
  r.Finish();
  const auto batches_before = r.BatchCount();

  auto second = SubmitCommit(r.store, r.Git(), r.Request(b, a), kT0);
  REQUIRE(second);
  REQUIRE(second->size() == 1);  // no companion for a reused batch
  const auto& x = (*second)[0];
  REQUIRE(x.reused);
  CHECK(x.reused->batch.id == (*first)[0].result.batch_id);
  CHECK(x.reused->at_sha == a);
  CHECK(x.result.reuses_batch_id == (*first)[0].result.batch_id);
  CHECK(r.BatchCount() == batches_before + 1);  // the reusing row, no runs

  // Submitting again says it reuses already; --rerun queues runs of its own.
  auto again = SubmitCommit(r.store, r.Git(), r.Request(b, a), kT0);
  REQUIRE(again);
  REQUIRE(again->size() == 1);
  CHECK((*again)[0].already_reusing);
  auto rerun_req = r.Request(b, a);
  rerun_req.rerun = true;
  auto rerun = SubmitCommit(r.store, r.Git(), rerun_req, kT0);
  REQUIRE(rerun);
  REQUIRE(rerun->size() == 2);  // x with runs of its own, and its companion
  CHECK_FALSE((*rerun)[0].result.reuses_batch_id);
  CHECK((*rerun)[0].result.runs_added == 3);
}

// Issue 38.4: adding `correction: bh` or `determinism: check` to defaults
// re-queued every experiment on `trainq submit` (the reused batch's spec had
// to be equal, judging keys and all), while the docs say it reruns nothing.
TEST_CASE("submit: defaults that are no run input rerun nothing, the reused batch is judged by the "
          "new keys, and a determinism check asked for runs without rerunning the batch",
          "[submit]") {
  const std::string plain = "version: 1\n"
                            "defaults:\n"
                            "  repeats: 3\n"
                            "experiments:\n"
                            "  x:\n"
                            "    command: echo x {seed}\n"
                            "    watch: [x/**]\n";
  auto with = [&](const std::string& keys) {
    std::string text = plain;
    text.replace(text.find("experiments:"), 0, keys);
    return text;
  };
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", plain}, {"x/a", "1"}}, "A");
  auto first = SubmitCommit(r.store, r.Git(), r.Request(a, ""), kT0);
  REQUIRE(first);
  REQUIRE(first->size() == 1);
  const std::int64_t at_a = (*first)[0].result.batch_id;
  r.Finish();
  auto runs = [&] { return r.store.runs().Runs(std::nullopt, std::nullopt, 0).value().size(); };
  const auto runs_before = runs();

  std::string b = r.cli.Commit(
      {{"trainq.yaml", with("  correction: bh\n  metric: {min_effect: 0.003}\n  baseline: reuse\n")}},
      "B: judging keys");
  auto second = SubmitCommit(r.store, r.Git(), r.Request(b, a), kT0);
  REQUIRE(second);
  REQUIRE(second->size() == 1);
  REQUIRE((*second)[0].reused);
  CHECK((*second)[0].result.reuses_batch_id == at_a);
  CHECK(runs() == runs_before);
  // The batch at B is judged as B's trainq.yaml says.
  auto row = r.store.runs().Batch((*second)[0].result.batch_id).value().value();
  auto spec = nlohmann::json::parse(row.spec_json);
  CHECK(spec["correction"] == "bh");
  CHECK(spec["metric"]["min_effect"] == 0.003);
  CHECK(spec["baseline"] == "reuse");

  std::string c = r.cli.Commit(
      {{"trainq.yaml", with("  correction: bh\n  metric: {min_effect: 0.003}\n  baseline: reuse\n"
                            "  determinism: check\n")}},
      "C: determinism check");
  auto third = SubmitCommit(r.store, r.Git(), r.Request(c, b), kT0);
  REQUIRE(third);
  REQUIRE(third->size() == 2);
  CHECK((*third)[0].result.experiment == "x");
  CHECK((*third)[0].result.reuses_batch_id == at_a);
  CHECK((*third)[1].result.experiment == std::string("x") + std::string(kReproSuffix));
  CHECK((*third)[1].result.created);
  CHECK((*third)[1].result.runs_added == 1);
  CHECK(runs() == runs_before + 1);  // the check's one run, not the batch again
  // Once asked, not again.
  auto again = SubmitCommit(r.store, r.Git(), r.Request(c, b), kT0);
  REQUIRE(again);
  REQUIRE(again->size() == 1);
  CHECK((*again)[0].already_reusing);
  CHECK(runs() == runs_before + 1);
  // The check reads the reused runs: seed 1 ran twice.
  r.Finish();
  auto head = r.store.runs().Batch((*third)[0].result.batch_id).value().value();
  auto check = ReproOf(r.store, head);
  REQUIRE(check);
  REQUIRE(*check);
  CHECK((*check)->text.starts_with("reproducible"));
}

TEST_CASE("submit: a missing baseline is queued at the base through the same path, with the "
          "head's seeds",
          "[submit]") {
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string c = r.cli.Commit({{"x/a", "2"}}, "C: changes x");
  auto req = r.Request(c, a);
  req.determinism_checks = false;
  req.specs[0].seed_start = 5;
  auto out = SubmitCommit(r.store, r.Git(), req, kT0);
  REQUIRE(out);
  REQUIRE(out->size() == 1);
  const auto& head = (*out)[0];
  CHECK_FALSE(head.baseline_error);
  CHECK(head.baseline_batch);
  auto row = r.store.runs().Batch(head.result.batch_id).value().value();
  REQUIRE(row.baseline_batch_id);
  auto base = r.store.runs().Batch(*row.baseline_batch_id).value().value();
  CHECK(base.sha == a);
  CHECK(base.seed_start == 5);
  CHECK(head.baseline == "batch " + std::to_string(base.id) + " queued at the base " +
                             a.substr(0, 7) + " with the same seeds");
  // The queued baseline carries its inputs' fingerprint, as every batch does.
  auto spec = nlohmann::json::parse(base.spec_json);
  CHECK(spec.contains("inputs"));
}

TEST_CASE("baseline: an ancestor's batch whose stored inputs fingerprint differs from the "
          "base's is not taken as equivalent",
          "[submit][baseline]") {
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  std::string b = r.cli.Commit({{"README.md", "docs"}}, "B: docs only");
  std::string c = r.cli.Commit({{"x/a", "2"}}, "C: changes x");
  // A batch at A that says it ran other inputs (as a batch submitted from a
  // dirty or different definition would).
  auto at_a = r.Request(a, "");
  at_a.determinism_checks = false;
  auto j = nlohmann::json::parse(at_a.specs[0].spec_json);
  j["inputs"] = "0123456789abcdef0123456789abcdef";
  at_a.specs[0].spec_json = j.dump();
  REQUIRE(SubmitCommit(r.store, r.Git(), at_a, kT0));

  auto search = FindEquivalentBatch(r.store, r.Git(), r.Git().location(), "x", b);
  REQUIRE(search);
  CHECK_FALSE(search->batch);
  CHECK(search->stopped.find("ran other inputs of x") != std::string::npos);

  // With the fingerprint it really had, the same batch is the baseline.
  Repo r2;
  a = r2.cli.Commit({{"trainq.yaml", kManifest}, {"x/a", "1"}}, "A");
  b = r2.cli.Commit({{"README.md", "docs"}}, "B: docs only");
  auto good = r2.Request(a, "");
  good.determinism_checks = false;
  auto stored = SubmitCommit(r2.store, r2.Git(), good, kT0);
  REQUIRE(stored);
  auto found = FindEquivalentBatch(r2.store, r2.Git(), r2.Git().location(), "x", b);
  REQUIRE(found);
  REQUIRE(found->batch);
  CHECK(found->batch->id == (*stored)[0].result.batch_id);
  CHECK(found->steps == 1);
  (void)c;
}

namespace {

const char* kThree = R"(version: 1
defaults:
  repeats: 6
experiments:
  mlp:
    command: echo mlp {seed}
    watch: [mlp/**]
  logreg:
    command: echo logreg {seed}
    watch: [logreg/**]
  strong:
    command: echo strong {seed}
    watch: [strong/**]
)";

// Per seed 1..6: mlp at the head is worse, paired t p = 0.037.
const std::vector<double> kFamilyBase = {0.900, 0.910, 0.905, 0.895, 0.915, 0.902};
const std::vector<double> kFamilyWorse = {0.878, 0.913, 0.890, 0.891, 0.903, 0.892};

// The specs of `names` at `sha`, with their inputs' fingerprints: what
// `trainq submit` (every experiment) or a push (the ones it changed) asks for.
SubmitRequest FamilyRequest(GitRepo& git, const std::string& sha, const std::string& base,
                            const std::vector<std::string>& names) {
  SubmitRequest req;
  req.commit = git.Resolve(sha).value();
  auto manifest = ParseManifest(git.ReadFile(sha, "trainq.yaml").value(), "trainq.yaml").value();
  for (const auto& n : names) req.specs.push_back(manifest.Find(n)->ToBatchSpec("test"));
  REQUIRE(AddInputsFingerprints(git, sha, manifest, req.specs));
  if (!base.empty()) req.base_sha = base;
  req.determinism_checks = false;
  return req;
}

void FinishFamily(Store& store, const std::vector<double>& values) {
  auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, values.at(static_cast<size_t>(l.seed - 1))));
  }
}

// Issue 40: a baseline whose commit git no longer has cannot grow. Git is
// asked before the top-up is queued: no run is queued there to die, the
// head grows only as far as an unpaired test can use, and the status says why.
TEST_CASE("submit: an until-decided top-up asks git first: a baseline commit that is gone does not grow",
          "[submit][topup]") {
  const char* manifest = R"(version: 1
defaults:
  correction: none
  repeats: {min: 4, max: 12, step: 4, until: decided}
  metric: {name: accuracy, goal: max, min_effect: 0.003}
experiments:
  x:
    command: echo x {seed}
    watch: [x/**]
)";
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", manifest}, {"x/a", "1"}}, "A");
  // The base is a commit on a side branch that is deleted (and pruned) later.
  r.cli.Run("checkout -q -b side");
  std::string side = r.cli.Commit({{"x/a", "3"}}, "side: x at 3");
  r.cli.Run("checkout -q main");
  std::string b = r.cli.Commit({{"x/a", "2"}}, "B: change x");
  auto base = SubmitCommit(r.store, r.Git(), r.Request(side, a), kT0);
  REQUIRE(base);
  const std::int64_t base_id = (*base)[0].result.batch_id;
  auto finish = [&](double shift) {
    auto leased = r.store.runs().Lease("w", kT0, 60'000, 100).value();
    for (const auto& l : leased) {
      double seed_effect = 0.01 * ((l.seed * 7) % 5);
      bool head = l.batch_id != base_id;
      double noise = 0.004 * (((l.seed * 13 + (head ? 3 : 0)) % 7) / 3.0 - 1);
      REQUIRE(r.store.runs().Complete(l.run_id, l.token, kT0,
                                      0.9 + seed_effect + noise + (head ? shift : 0)));
    }
  };
  finish(0);
  auto head = SubmitCommit(r.store, r.Git(), r.Request(b, side), kT0);
  REQUIRE(head);
  const std::int64_t head_id = (*head)[0].result.batch_id;
  REQUIRE(r.store.runs().Batch(head_id).value()->baseline_batch_id == base_id);
  finish(0);
  // The side branch goes, and git forgets its commit.
  r.cli.Run("branch -q -D side");
  r.cli.Run("reflog expire --expire=now --all");
  r.cli.Run("gc -q --prune=now");
  r.git.reset();
  // Undecided at 4 pairs, but the baseline cannot grow: nothing is queued
  // at either side (4 head runs already match the baseline's 4).
  CHECK(ExtendIfNeeded(r.store, head_id, kT0).value() == 0);
  CHECK(r.store.runs().Runs(base_id, std::nullopt, 0).value().size() == 4);
  CHECK(r.store.runs().Runs(head_id, std::nullopt, 0).value().size() == 4);
  auto hb = r.store.runs().Batch(head_id).value().value();
  CHECK(hb.baseline_note.find("the baseline cannot grow: its commit " + side.substr(0, 7) +
                              " is no longer in the repository") != std::string::npos);
  auto c = CompareInFamily(r.store, hb, false).value();
  REQUIRE(c);
  auto j = ComparisonJson(*c);
  CHECK(j["top_up"].get<std::string>() ==
        "stopped at 4 runs: the baseline cannot grow (its commit " + side.substr(0, 7) +
            " is no longer in the repository), and an unpaired test against its 4 runs gains "
            "little from more runs here");
  // Asked again (another run ended): still nothing, and the note once.
  CHECK(ExtendIfNeeded(r.store, head_id, kT0).value() == 0);
  auto again = r.store.runs().Batch(head_id).value().value();
  CHECK(again.baseline_note == hb.baseline_note);
}

}  // namespace

TEST_CASE("family: after trainq submit, reused unchanged batches are shown but not counted, so "
          "submit and push agree and gate answers the same with or without -e (issue 38.2)",
          "[submit][family]") {
  testing::TempDir tmp;
  testing::GitCli cli(tmp / "repo");
  std::string a = cli.Commit({{"trainq.yaml", kThree},
                              {"mlp/c", "lr 0.01"},
                              {"logreg/c", "C 1"},
                              {"strong/c", "C 0.1"}},
                             "A");
  std::string b = cli.Commit({{"mlp/c", "lr 0.003"}}, "B: mlp only");
  auto git = GitRepo::Open(cli.dir()).value();
  const std::vector<std::string> all = {"mlp", "logreg", "strong"};
  // Two stores over one history: `trainq submit` gives B a batch of every
  // experiment (the unchanged ones reuse A's); a push gives B only mlp's.
  Store submitted = Store::Open(tmp / "submit.db").value();
  Store pushed = Store::Open(tmp / "push.db").value();
  for (Store* s : {&submitted, &pushed}) {
    REQUIRE(SubmitCommit(*s, git, FamilyRequest(git, a, "", all), kT0));
    FinishFamily(*s, kFamilyBase);
  }
  auto by_submit = SubmitCommit(submitted, git, FamilyRequest(git, b, a, all), kT0).value();
  auto by_push = SubmitCommit(pushed, git, FamilyRequest(git, b, a, {"mlp"}), kT0).value();
  REQUIRE(by_submit.size() == 3);
  CHECK(by_submit[1].reused);
  CHECK(by_submit[2].reused);
  REQUIRE(by_push.size() == 1);
  FinishFamily(submitted, kFamilyWorse);
  FinishFamily(pushed, kFamilyWorse);

  std::vector<BatchComparison> mlp;
  for (Store* s : {&submitted, &pushed}) {
    auto family = CommitFamily(*s, git.location(), b).value();
    CHECK(FamilySize(family) == 1);
    auto made = CompareFamily(family, /*compare_running=*/false);
    for (size_t i = 0; i < family.size(); ++i) {
      REQUIRE(made[i]);
      if (family[i].head.experiment == "mlp") {
        mlp.push_back(*made[i]);
      } else {
        // Shown: the same runs as its baseline, unchanged, not compared.
        CHECK(family[i].unchanged());
        CHECK(made[i]->unchanged);
        CHECK(VerdictWord(*made[i]) == "unchanged");
      }
    }
  }
  REQUIRE(mlp.size() == 2);
  for (const auto& c : mlp) {
    CHECK(c.family_size == 1);
    CHECK(c.verdict == stats::Verdict::kWorse);
    CHECK(*c.p_adjusted == Approx(*c.p_raw));
    CHECK(*c.p_raw == Approx(*mlp[0].p_raw));
    CHECK(c.interval_level == Approx(0.95));
  }
  CHECK(*mlp[0].p_raw == Approx(0.0372).margin(1e-3));

  // The gate: a regression on both paths, with or without -e mlp.
  for (Store* s : {&submitted, &pushed}) {
    for (const std::vector<std::string>& only :
         {std::vector<std::string>{}, std::vector<std::string>{"mlp"}}) {
      GateRequest req;
      req.rev = b;
      req.baseline = a;
      req.repo_dir = cli.dir();
      req.experiments = only;
      auto d = DecideGate(*s, req);
      REQUIRE(d);
      INFO(d->text);
      CHECK(d->exit_code == kGateRegression);
      CHECK(d->json["correction"]["family_size"] == 1);
      CHECK(d->text.find("Holm over") == std::string::npos);
    }
  }
}

// Issue 40: `trainq submit` at the parent and at the head, `until: decided`:
// the head's top-up round adds the same seeds to the parent's batch (its
// baseline), so that every extra run is a pair; before, only the head grew
// and the paired test stayed at 4 seeds.
TEST_CASE("submit: an until-decided top-up grows the baseline's batch with the same seeds",
          "[submit][topup]") {
  const char* manifest = R"(version: 1
defaults:
  correction: none
  repeats: {min: 4, max: 12, step: 4, until: decided}
  metric: {name: accuracy, goal: max, min_effect: 0.003}
experiments:
  x:
    command: echo x {seed}
    watch: [x/**]
)";
  Repo r;
  std::string a = r.cli.Commit({{"trainq.yaml", manifest}, {"x/a", "1"}}, "A");
  std::string b = r.cli.Commit({{"x/a", "2"}}, "B: change x");
  auto parent = SubmitCommit(r.store, r.Git(), r.Request(a, ""), kT0);
  REQUIRE(parent);
  const std::int64_t base_id = (*parent)[0].result.batch_id;
  // The parent's runs: a seed effect, nothing more.
  auto finish = [&](double shift) {
    auto leased = r.store.runs().Lease("w", kT0, 60'000, 100).value();
    for (const auto& l : leased) {
      double seed_effect = 0.01 * ((l.seed * 7) % 5);
      bool head = l.batch_id != base_id;
      double noise = 0.004 * (((l.seed * 13 + (head ? 3 : 0)) % 7) / 3.0 - 1);
      REQUIRE(r.store.runs().Complete(l.run_id, l.token, kT0,
                                      0.9 + seed_effect + noise + (head ? shift : 0)));
    }
    return leased;
  };
  finish(0);
  REQUIRE(ExtendIfNeeded(r.store, base_id, kT0).value() == 0);  // no baseline of its own
  auto head = SubmitCommit(r.store, r.Git(), r.Request(b, a), kT0);
  REQUIRE(head);
  const std::int64_t head_id = (*head)[0].result.batch_id;
  auto head_batch = r.store.runs().Batch(head_id).value().value();
  REQUIRE(head_batch.baseline_batch_id == base_id);
  finish(0);
  // Undecided at 4 pairs: the head and its baseline each get seeds 5..8.
  CHECK(ExtendIfNeeded(r.store, head_id, kT0).value() == 8);
  auto base_runs = r.store.runs().Runs(base_id, std::nullopt, 0).value();
  auto head_runs = r.store.runs().Runs(head_id, std::nullopt, 0).value();
  REQUIRE(base_runs.size() == 8);
  REQUIRE(head_runs.size() == 8);
  std::set<std::int64_t> bs, hs;
  for (const auto& x : base_runs) bs.insert(x.seed);
  for (const auto& x : head_runs) hs.insert(x.seed);
  CHECK(bs == hs);
  CHECK(*bs.rbegin() == 8);
  finish(0);
  // The baseline's runs ended in the same round: the look after it pairs 8.
  ExtendIfNeeded(r.store, base_id, kT0).value();
  // (compared while a next round, if any, is queued: its runs are not values yet)
  auto c = CompareInFamily(r.store, r.store.runs().Batch(head_id).value().value(), true).value();
  REQUIRE(c);
  CHECK(c->shared_seeds >= 8);
  auto j = ComparisonJson(*c);
  CHECK(j["cost"]["runs_baseline"].get<int>() == j["cost"]["runs_here"].get<int>());
}
