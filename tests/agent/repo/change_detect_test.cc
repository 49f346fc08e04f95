// Change detection: glob semantics and which experiments run, as tables.
#include "agent/repo/change_detect.h"

#include <catch2/catch.hpp>

namespace trainq {
namespace {

using Kind = ChangedPath::Kind;

TEST_CASE("glob: *, ? and ** semantics", "[change_detect]") {
  struct Case {
    const char* glob;
    const char* path;
    bool match;
  };
  const Case cases[] = {
      {"train.py", "train.py", true},
      {"train.py", "src/train.py", false},  // the whole path, from the root
      {"*.py", "train.py", true},
      {"*.py", "src/train.py", false},      // `*` never crosses '/'
      {"**/*.py", "train.py", true},        // `**` is zero or more segments
      {"**/*.py", "src/a/train.py", true},
      {"configs/*.yaml", "configs/lstm.yaml", true},
      {"configs/*.yaml", "configs/old/lstm.yaml", false},
      {"configs/*", "configs", false},
      {"data/**", "data/digits.csv.gz", true},
      {"data/**", "data/a/b/c.bin", true},
      {"data/**", "database.sql", false},
      {"data/**", "data", true},            // zero segments after data/
      {"models/**/weights.bin", "models/weights.bin", true},
      {"models/**/weights.bin", "models/x/y/weights.bin", true},
      {"models/**/weights.bin", "models/x/y/weights.bin.bak", false},
      {"config?.yaml", "config1.yaml", true},
      {"config?.yaml", "config12.yaml", false},
      {"config?.yaml", "config/.yaml", false},  // `?` never matches '/'
      {"a**b", "axxb", true},                 // `**` inside a segment acts like `*`
      {"a**b", "ax/xb", false},
      {"*", "README.md", true},
      {"*", "docs/README.md", false},
      {"**", "docs/README.md", true},
      {"./train.py", "train.py", true},
      {"src/*_test.cc", "src/a_test.cc", true},
      {"src/*_test.cc", "src/a_test.cc.orig", false},
      {"*a*b*c", "xaybzc", true},
      {"*a*b*c", "xaybz", false},
      {"", "train.py", false},
  };
  for (const auto& c : cases) {
    INFO(c.glob << " vs " << c.path);
    CHECK(GlobMatch(c.glob, c.path) == c.match);
  }
}

Manifest Parse(const std::string& yaml) {
  auto m = ParseManifest(yaml, "trainq.yaml");
  REQUIRE(m);
  return *m;
}

const char* kBase = R"(version: 1
defaults:
  repeats: 3
experiments:
  lstm:
    command: python train.py --config configs/lstm.yaml --seed {seed}
    watch: [train.py, configs/lstm.yaml, models/**]
  mlp:
    command: python train.py --config configs/mlp.yaml --seed {seed}
    watch: [train.py, configs/mlp.yaml]
  digits:
    trainer: configs/digits.yaml
    watch: [data/**]
)";

std::vector<std::string> Names(const std::vector<ExperimentTrigger>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts) out.push_back(t.experiment);
  return out;
}

ChangedPath Mod(const std::string& p) { return {Kind::kModified, p, p}; }

TEST_CASE("change detection: which experiments a set of changed paths runs", "[change_detect]") {
  Manifest m = Parse(kBase);
  struct Case {
    const char* what;
    std::vector<ChangedPath> changes;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"nothing changed", {}, {}},
      {"an unwatched file", {Mod("README.md")}, {}},
      {"one experiment's config", {Mod("configs/lstm.yaml")}, {"lstm"}},
      {"a file both watch", {Mod("train.py")}, {"lstm", "mlp"}},
      {"deep under models/**", {Mod("models/rnn/cell.py")}, {"lstm"}},
      {"added file", {{Kind::kAdded, "", "models/new.py"}}, {"lstm"}},
      {"deleted file", {{Kind::kDeleted, "configs/mlp.yaml", ""}}, {"mlp"}},
      {"renamed into a watched path", {{Kind::kRenamed, "old/x.py", "models/x.py"}}, {"lstm"}},
      {"renamed out of a watched path", {{Kind::kRenamed, "configs/mlp.yaml", "old/mlp.yaml"}},
       {"mlp"}},
      {"trainer spec (implicitly watched)", {Mod("configs/digits.yaml")}, {"digits"}},
      {"data for the trainer experiment", {Mod("data/digits.csv.gz")}, {"digits"}},
      {"two unrelated changes", {Mod("configs/mlp.yaml"), Mod("data/x")}, {"mlp", "digits"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    CHECK(Names(DetectChanges(c.changes, &m, m)) == c.expected);
  }
}

TEST_CASE("change detection: trainq.yaml edits", "[change_detect]") {
  Manifest before = Parse(kBase);
  std::vector<ChangedPath> yaml_changed = {Mod("trainq.yaml")};

  SECTION("one experiment's entry changed: only that one") {
    std::string text = kBase;
    text.replace(text.find("configs/mlp.yaml --seed"), 16, "configs/mlp2.yaml");
    Manifest after = Parse(text);
    auto ts = DetectChanges(yaml_changed, &before, after);
    REQUIRE(Names(ts) == std::vector<std::string>{"mlp"});
    CHECK(ts[0].Reason() == "its entry in trainq.yaml changed");
  }
  SECTION("a comment or reordering elsewhere changes nothing") {
    std::string text = std::string("# a comment\n") + kBase;
    Manifest after = Parse(text);
    CHECK(DetectChanges(yaml_changed, &before, after).empty());
  }
  SECTION("defaults changed: every experiment") {
    std::string text = kBase;
    text.replace(text.find("repeats: 3"), 10, "repeats: 5");
    Manifest after = Parse(text);
    auto ts = DetectChanges(yaml_changed, &before, after);
    CHECK(Names(ts) == std::vector<std::string>{"lstm", "mlp", "digits"});
    CHECK(ts[0].Reason() == "defaults in trainq.yaml changed");
  }
  SECTION("keys that are no run input change nothing (issue 38.4)") {
    // Each a one-line commit that used to re-queue every experiment on
    // `trainq submit` (and, for determinism, started no check on a push).
    const std::pair<const char*, const char*> edits[] = {
        {"  repeats: 3\n", "  repeats: 3\n  correction: bh\n"},
        {"  repeats: 3\n", "  repeats: 3\n  metric: {min_effect: 0.003}\n"},
        {"  repeats: 3\n", "  repeats: 3\n  baseline: reuse\n"},
        {"    watch: [train.py, configs/mlp.yaml]\n",
         "    watch: [train.py, configs/mlp.yaml]\n    metric: {min_effect: 0.01}\n"},
        {"    watch: [data/**]\n", "    watch: [data/**]\n    baseline: off\n"},
    };
    for (const auto& [from, to] : edits) {
      std::string text = kBase;
      text.replace(text.find(from), std::string(from).size(), to);
      INFO(text);
      Manifest after = Parse(text);
      CHECK(DetectChanges(yaml_changed, &before, after).empty());
      for (const auto& e : after.experiments) {
        CHECK(e.definition == before.Find(e.name)->definition);
      }
      CHECK(after.defaults_definition == before.defaults_definition);
    }
    // A metric written as its name, then with a min_effect: the same inputs.
    std::string named = kBase, with_effect = kBase;
    named.replace(named.find("  repeats: 3\n"), 13, "  repeats: 3\n  metric: accuracy\n");
    with_effect.replace(with_effect.find("  repeats: 3\n"), 13,
                        "  repeats: 3\n  metric: {name: accuracy, min_effect: 0.01}\n");
    CHECK(DetectChanges(yaml_changed, &before, Parse(named)).size() == 3);  // a new key
    Manifest named_m = Parse(named);
    CHECK(DetectChanges(yaml_changed, &named_m, Parse(with_effect)).empty());
    // The metric's name, goal and regex are inputs.
    std::string text = kBase;
    text.replace(text.find("  repeats: 3\n"), 13, "  repeats: 3\n  metric: {name: loss, goal: min}\n");
    CHECK(Names(DetectChanges(yaml_changed, &before, Parse(text))).size() == 3);
  }
  SECTION("determinism: check asked for anew runs only the check: inputs unchanged") {
    std::string text = kBase;
    text.replace(text.find("  repeats: 3\n"), 13, "  repeats: 3\n  determinism: check\n");
    Manifest after = Parse(text);
    auto ts = DetectChanges(yaml_changed, &before, after);
    REQUIRE(Names(ts) == std::vector<std::string>{"lstm", "mlp", "digits"});
    for (const auto& t : ts) {
      CHECK_FALSE(t.inputs_changed);
      CHECK(t.Reason() == "determinism: check asked for in trainq.yaml");
    }
    // Already on: nothing; a real change with it: an inputs change.
    CHECK(DetectChanges(yaml_changed, &after, after).empty());
    ts = DetectChanges({Mod("configs/mlp.yaml")}, &before, after);
    REQUIRE(ts.size() == 3);
    CHECK(ts[1].experiment == "mlp");
    CHECK(ts[1].inputs_changed);
    // Turned off: nothing runs.
    CHECK(DetectChanges(yaml_changed, &after, before).empty());
  }
  SECTION("a new experiment") {
    std::string text = std::string(kBase) + "  gru:\n    command: python gru.py\n";
    Manifest after = Parse(text);
    auto ts = DetectChanges(yaml_changed, &before, after);
    REQUIRE(Names(ts) == std::vector<std::string>{"gru"});
    CHECK(ts[0].Reason() == "new experiment in trainq.yaml");
  }
  SECTION("no trainq.yaml before: everything is new") {
    auto ts = DetectChanges({{Kind::kAdded, "", "trainq.yaml"}}, nullptr, before);
    CHECK(Names(ts) == std::vector<std::string>{"lstm", "mlp", "digits"});
    CHECK(ts[2].Reason() == "new experiment (no trainq.yaml before)");
  }
}

TEST_CASE("change detection: reasons name the path and the glob", "[change_detect]") {
  Manifest m = Parse(kBase);
  auto ts = DetectChanges({Mod("configs/lstm.yaml"), {Kind::kRenamed, "a.py", "models/a.py"},
                           {Kind::kDeleted, "models/old.py", ""}},
                          &m, m);
  REQUIRE(ts.size() == 1);
  CHECK(ts[0].Reason() ==
        "configs/lstm.yaml matches watch 'configs/lstm.yaml'; a.py -> models/a.py (renamed) "
        "matches watch 'models/**'; models/old.py (deleted) matches watch 'models/**'");

  std::vector<ChangedPath> many;
  for (int i = 0; i < 8; ++i) many.push_back(Mod("models/m" + std::to_string(i) + ".py"));
  auto long_list = DetectChanges(many, &m, m);
  REQUIRE(long_list.size() == 1);
  CHECK(long_list[0].reasons.size() == 8);
  CHECK(long_list[0].Reason().ends_with("; and 3 more"));
}

}  // namespace
}  // namespace trainq
