// One verdict document (issue 38.1): a Holm family of two changed
// experiments, one with raw p < 0.05 but adjusted p > 0.05, rendered through
// every surface that shows a comparison: `trainq show` (text and --json),
// `compare` (text and --json), `gate` (text, --json, with and without -e),
// the commit status the reporter posts, the PR comment body and the report's
// JSON. Each must show the interval and p the verdict used (widened,
// adjusted), the raw p beside it and "Holm over 2", with the same numbers.
// Real git, the real `trainq submit` path (a third, unchanged experiment is
// reused and must not count), a real store and a fake forge on loopback.
// A second case does the same for the test-set noise floor.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <tuple>

#include "agent/cli/cli.h"
#include "agent/results/analysis.h"
#include "agent/results/gate.h"
#include "agent/results/report.h"
#include "agent/triggers/forge_status.h"
#include "agent/triggers/pr_comments.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "stats/noise_floor.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;
using nlohmann::json;

namespace {

const char* kManifest = R"(version: 1
defaults:
  repeats: 6
experiments:
  a:
    command: sh run.sh a {seed}
    watch: [configs/a.txt]
  b:
    command: sh run.sh b {seed}
    watch: [configs/b.txt]
  c:
    command: sh run.sh c {seed}
    watch: [configs/c.txt]
)";

// Per seed 1..6. a at the head: paired t p = 0.037 (raw < 0.05), Holm over
// 2 adjusted 0.074: no detectable change, though the raw 95% CI excludes 0.
const std::vector<double> kBase = {0.900, 0.910, 0.905, 0.895, 0.915, 0.902};
const std::vector<double> kHeadA = {0.922, 0.907, 0.920, 0.899, 0.927, 0.912};
const std::vector<double> kHeadB = {0.904, 0.904, 0.915, 0.887, 0.917, 0.905};

// Leases every queued run and completes it with values[experiment][seed - 1].
void Finish(Store& store, const std::map<std::string, std::vector<double>>& values) {
  auto leased = store.runs().Lease("w", 1'000, 60'000, 100).value();
  for (const auto& l : leased) {
    const auto& v = values.at(l.experiment);
    REQUIRE(store.runs().Complete(l.run_id, l.token, 1'000, v.at(static_cast<size_t>(l.seed - 1))));
  }
}

// The numbers after the first match of `re` in `text` (its groups).
std::vector<double> Numbers(const std::string& text, const std::string& re) {
  std::smatch m;
  INFO(text);
  INFO(re);
  REQUIRE(std::regex_search(text, m, std::regex(re)));
  std::vector<double> out;
  for (size_t i = 1; i < m.size(); ++i) out.push_back(std::stod(m[i].str()));
  return out;
}

// `shown` is `want` printed with `decimals` decimals.
void Same(double shown, double want, int decimals) {
  CHECK(std::fabs(shown - want) <= 0.5 * std::pow(10.0, -decimals) + 1e-12);
}

BatchProgress BatchOf(Store& store, const std::string& sha, const std::string& experiment) {
  auto batches = store.runs().BatchesForCommit(sha).value();
  for (auto& b : batches) {
    if (b.experiment == experiment) return b;
  }
  FAIL("no batch of " << experiment << " at " << sha);
  return {};
}

}  // namespace

TEST_CASE("one verdict document: a Holm family renders the same interval, adjusted and raw p "
          "and correction through every surface",
          "[verdict][surfaces]") {
  testing::TempDir tmp;
  testing::GitCli work(tmp / "work");
  const std::string db = tmp / "t.db";
  std::string base = work.Commit({{"trainq.yaml", kManifest},
                                  {"run.sh", "true\n"},
                                  {"configs/a.txt", "1\n"},
                                  {"configs/b.txt", "1\n"},
                                  {"configs/c.txt", "1\n"}},
                                 "base");
  FakeClock clock;
  SubmitOptions so;
  so.db = db;
  so.repo = work.dir();
  std::ostringstream sink;
  REQUIRE(CmdSubmit(so, clock, sink));
  {
    auto store = Store::Open(db).value();
    Finish(store, {{"a", kBase}, {"b", kBase}, {"c", kBase}});
  }
  std::string head = work.Commit({{"configs/a.txt", "2\n"}, {"configs/b.txt", "2\n"}},
                                 "a and b change");
  REQUIRE(CmdSubmit(so, clock, sink));
  auto store = Store::Open(db).value();
  Finish(store, {{"a", kHeadA}, {"b", kHeadB}});

  // The reference: the one computed comparison of a, in its commit's family.
  BatchProgress a = BatchOf(store, head, "a");
  BatchProgress c_batch = BatchOf(store, head, "c");
  REQUIRE(c_batch.reuses_batch_id);  // c did not change: its batch reuses the base's runs
  auto ref_opt = CompareInFamily(store, a, /*compare_running=*/false).value();
  REQUIRE(ref_opt);
  const BatchComparison ref = *ref_opt;
  REQUIRE(ref.family_size == 2);  // a and b; the reused c does not count
  REQUIRE(ref.correction == stats::Correction::kHolm);
  REQUIRE(ref.p_raw);
  REQUIRE(ref.p_adjusted);
  REQUIRE(ref.interval);
  CHECK(*ref.p_raw < 0.05);
  CHECK(*ref.p_adjusted > 0.05);
  CHECK(ref.verdict == stats::Verdict::kNoDetectableChange);
  CHECK(ref.interval_level == Approx(0.975));
  CHECK(ref.interval->lo < 0);  // the interval the verdict used includes 0 ...
  CHECK(ref.cmp->paired->ci95.lo > 0);  // ... the raw 95% one does not
  const double lo = ref.interval->lo, hi = ref.interval->hi;
  const double p_raw = *ref.p_raw, p_adj = *ref.p_adjusted;

  // The JSON documents all carry ComparisonJson's correction object.
  auto check_correction = [&](const json& corr, const std::string& where) {
    INFO(where << ": " << corr.dump());
    CHECK(corr["method"] == "holm");
    CHECK(corr["family_size"] == 2);
    CHECK(corr["text"] == "Holm over 2");
    CHECK(corr["p_raw"].get<double>() == Approx(p_raw));
    CHECK(corr["p_adjusted"].get<double>() == Approx(p_adj));
    CHECK(corr["interval_level"].get<double>() == Approx(0.975));
    CHECK(corr["level_text"] == "97.5% CI");
    CHECK(corr["interval"][0].get<double>() == Approx(lo));
    CHECK(corr["interval"][1].get<double>() == Approx(hi));
  };
  // Text surfaces: "97.5% CI lo..hi" (4 decimals) and the raw and adjusted p
  // (3 decimals) with "Holm over 2", in a's part (from `anchor` on).
  auto check_text = [&](const std::string& all, const std::string& where,
                        const std::string& anchor) {
    INFO(where << ":\n" << all);
    size_t at = all.find(anchor);
    REQUIRE(at != std::string::npos);
    const std::string text = all.substr(at);
    auto ci = Numbers(text, R"(97\.5% CI ([-+][0-9.]+)\.\.([-+][0-9.]+))");
    Same(ci[0], lo, 4);
    Same(ci[1], hi, 4);
    auto p = Numbers(text, R"(p=([0-9.]+) raw, p=([0-9.]+) adjusted \(Holm over 2\))");
    Same(p[0], p_raw, 3);
    Same(p[1], p_adj, 3);
    CHECK(text.find("no detectable change") != std::string::npos);
  };

  SECTION("trainq show, text and --json") {
    ShowOptions o;
    o.db = db;
    o.commit = head;
    o.repo = work.dir();
    std::ostringstream text;
    REQUIRE(CmdShow(o, text));
    check_text(text.str(), "show", "  batch " + std::to_string(a.id) + " a\n");
    // The cost of the verdict: the same words on every surface (issue 40).
    CHECK(text.str().find("    cost:   " + CostText(ref) + "\n") != std::string::npos);
    CHECK(text.str().find("family: 2 changed (a, b), Holm over 2; unchanged, not counted: c") !=
          std::string::npos);
    o.json = true;
    std::ostringstream js;
    REQUIRE(CmdShow(o, js));
    auto view = json::parse(js.str());
    CHECK(view["family"]["size"] == 2);
    CHECK(view["family"]["unchanged"] == json::array({"c"}));
    for (const auto& bj : view["batches"]) {
      if (bj["experiment"] == "a") {
        CHECK(bj["vs_parent"]["verdict"] == "no detectable change");
        check_correction(bj["vs_parent"]["correction"], "show --json");
        CHECK(bj["vs_parent"]["text"] == ComparisonText(ref));
        CHECK(bj["vs_parent"]["cost"]["text"] == CostText(ref));
        CHECK(bj["vs_parent"]["cost"]["runs"] == 12);  // 6 here, 6 at the baseline
      }
      if (bj["experiment"] == "c") {
        CHECK_FALSE(bj.contains("vs_parent"));
        CHECK(bj["unchanged"]["batch"] == *c_batch.reuses_batch_id);
      }
    }
  }

  SECTION("trainq compare, text and --json") {
    CompareCommandOptions o;
    o.db = db;
    o.rev_a = head;
    o.rev_b = base;
    o.repo = work.dir();
    std::ostringstream text;
    REQUIRE(CmdCompare(o, text));
    check_text(text.str(), "compare", "a (accuracy, higher is better)");
    CHECK(text.str().find("verdicts corrected for 2 experiments at once: Holm over 2") !=
          std::string::npos);
    o.json = true;
    std::ostringstream js;
    REQUIRE(CmdCompare(o, js));
    for (const auto& cj : json::parse(js.str())) {
      if (cj["experiment"] == "a") {
        check_correction(cj["correction"], "compare --json");
        CHECK(cj["cost"]["text"] == CostText(ref));
      }
      if (cj["experiment"] == "c") CHECK(cj["verdict"] == "unchanged");
    }
  }

  SECTION("trainq gate, with and without -e: the same family, the same answer") {
    GateOptions o;
    o.db = db;
    o.rev = head;
    o.baseline = base;
    o.repo = work.dir();
    for (const std::vector<std::string>& only : {std::vector<std::string>{},
                                                 std::vector<std::string>{"a"}}) {
      o.experiments = only;
      o.json = false;
      std::ostringstream text;
      auto code = CmdGate(o, text);
      REQUIRE(code);
      CHECK(*code == kGatePass);
      check_text(text.str(), only.empty() ? "gate" : "gate -e a", "✓  a: ");
      CHECK(text.str().find("verdicts corrected for 2 experiments at once: Holm over 2") !=
            std::string::npos);
      o.json = true;
      std::ostringstream js;
      REQUIRE(CmdGate(o, js));
      auto g = json::parse(js.str());
      CHECK(g["correction"]["family_size"] == 2);
      for (const auto& e : g["experiments"]) {
        if (e["experiment"] == "a") {
          check_correction(e["comparison"]["correction"], "gate --json");
          CHECK(e["comparison"]["cost"]["text"] == CostText(ref));
        }
      }
    }
  }

  SECTION("the commit status the reporter posts") {
    testing::TestHttpServer forge([](const testing::TestHttpRequest&) {
      return testing::TestHttpResponse{201, "{}", {}};
    });
    REQUIRE(WriteFile(tmp / "token", "forge-token"));
    auto config = ParseServerConfig(
                      "repositories:\n  - url: https://github.com/acme/model.git\n"
                      "    forge: github\n    status: true\n    api_url: " +
                          forge.url() + "\n    token: {file: " + (tmp / "token") + "}\n",
                      "server.yaml")
                      .value();
    auto at_head = store.runs().BatchesForCommit(head).value();
    for (const auto& b : at_head) {
      Pushes::CommitStatus cs;
      cs.batch_id = b.id;
      cs.repo_url = "https://github.com/acme/model.git";
      cs.sha = head;
      cs.context = "trainq/" + b.experiment;
      cs.state = "pending";
      cs.description = "queued";
      REQUIRE(store.pushes().AddCommitStatus(cs, clock.Now()));
    }
    CurlHttpClient http;
    StatusReporter reporter(store, config, http, clock);
    REQUIRE(reporter.Step());
    std::map<std::string, std::string> posted;
    for (const auto& r : forge.requests()) {
      auto j = json::parse(r.body);
      posted[j["context"].get<std::string>()] = j["description"].get<std::string>();
    }
    const std::string& s = posted["trainq/a"];
    INFO(s);
    auto ci = Numbers(s, R"(\[([-+][0-9.]+), ([-+][0-9.]+)\])");
    Same(ci[0], lo, 3);
    Same(ci[1], hi, 3);
    auto p = Numbers(s, R"(Holm over 2: p=([0-9.]+), adj ([0-9.]+)\))");
    Same(p[0], p_raw, 3);
    Same(p[1], p_adj, 3);
    CHECK(s.find("no detectable change") != std::string::npos);
    CHECK(posted["trainq/c"].find("unchanged since") != std::string::npos);
  }

  SECTION("the PR comment body") {
    PrCommentView view;
    view.forge = "github";
    view.pr_number = 3;
    view.head_sha = head;
    view.target_branch = "main";
    view.commit_url = "https://trainq.example/commit/" + head;
    auto at_head = store.runs().BatchesForCommit(head).value();
    for (auto& b : at_head) {
      auto parent = ParentBatch(store, b).value();
      view.experiments.emplace_back(b, parent);
    }
    const std::string all = RenderPrComment(view);
    INFO(all);
    const std::string body = all.substr(all.find("#### `a`"));
    auto ci = Numbers(body, R"(\(97\.5% CI ([-+][0-9.]+)\.\.([-+][0-9.]+)\))");
    Same(ci[0], lo, 4);
    Same(ci[1], hi, 4);
    auto p = Numbers(body, R"(p=([0-9.]+) raw, p=([0-9.]+) adjusted \(Holm over 2\))");
    Same(p[0], p_raw, 3);
    Same(p[1], p_adj, 3);
    CHECK(all.find("Verdicts are corrected for 2 experiments changed at once (Holm over 2)") !=
          std::string::npos);
    CHECK(all.find("#### `c`: unchanged") != std::string::npos);
    CHECK(all.find("](https://trainq.example/commit/" + head + ")") != std::string::npos);
  }

  SECTION("the report's JSON") {
    auto data = BuildReport(store, 0, "all", {}).value();
    CHECK(RenderMarkdown(data).find(CostText(ref)) != std::string::npos);
    auto report = json::parse(RenderJson(data));
    bool saw = false;
    for (const auto& e : report["experiments"]) {
      if (e["experiment"] != "a") continue;
      for (const auto& bj : e["batches"]) {
        if (bj["commit"] != head) continue;
        saw = true;
        const json& vp = bj["vs_parent"];
        CHECK(vp["verdict"] == "no detectable change");
        CHECK(vp["p"].get<double>() == Approx(p_adj));
        CHECK(vp["p_raw"].get<double>() == Approx(p_raw));
        CHECK(vp["interval"][0].get<double>() == Approx(lo));
        CHECK(vp["text"] == ComparisonText(ref));
        check_correction(vp["correction"], "report.json");
      }
    }
    CHECK(saw);
    // c ran at the base only: shown once there, marked reused at the head.
    for (const auto& e : report["experiments"]) {
      if (e["experiment"] != "c") continue;
      REQUIRE(e["batches"].size() == 1);
      CHECK(e["batches"][0]["commit"] == base);
      CHECK(e["batches"][0]["reused_at"] == json::array({head}));
    }
  }
}

// The test-set noise floor (issue 40, docs/STATISTICS.md): runs that report
// `eval_examples` get the floor sqrt(p(1-p)/n) beside their seed sd, and
// every surface that shows the sd shows the same floor and the same words.
// The base's spread sits at its floor; the head's is above it.
TEST_CASE(
    "the test-set noise floor: show, status, compare, gate, the PR comment and the report give "
    "the same floor and say when the seed sd sits at it",
    "[verdict][surfaces][floor]") {
  testing::TempDir tmp;
  testing::GitCli work(tmp / "work");
  const std::string db = tmp / "t.db";
  const char* manifest = R"(version: 1
defaults:
  repeats: 6
experiments:
  a:
    command: sh run.sh a {seed}
    watch: [configs/a.txt]
)";
  std::string base = work.Commit(
      {{"trainq.yaml", manifest}, {"run.sh", "true\n"}, {"configs/a.txt", "1\n"}}, "base");
  FakeClock clock;
  SubmitOptions so;
  so.db = db;
  so.repo = work.dir();
  std::ostringstream sink;
  // Each run reports its metric and the 2,000 examples it was scored on.
  auto finish = [&](const std::vector<double>& values) {
    auto store = Store::Open(db).value();
    auto leased = store.runs().Lease("w", 1'000, 60'000, 100).value();
    for (const auto& l : leased) {
      REQUIRE(
          store.runs().AddMetrics(l.run_id, l.token, {{"eval_examples", 2000, 1, false}}, 1'000));
      REQUIRE(store.runs().Complete(l.run_id, l.token, 1'000,
                                    values.at(static_cast<size_t>(l.seed - 1))));
    }
  };
  REQUIRE(CmdSubmit(so, clock, sink));
  finish(kBase);
  std::string head = work.Commit({{"configs/a.txt", "2\n"}}, "a changes");
  REQUIRE(CmdSubmit(so, clock, sink));
  finish(kHeadA);

  // The reference, from the statistics alone.
  auto ref_base = stats::EvalNoiseFloor(kBase, 2000).value();
  auto ref_head = stats::EvalNoiseFloor(kHeadA, 2000).value();
  REQUIRE(ref_base.at_floor);        // sd 0.0072, its interval reaches 0.0044 < floor 0.0066
  REQUIRE_FALSE(ref_head.at_floor);  // sd 0.0107, its interval starts above floor 0.0063
  const std::string base_short = "floor " + FormatDouble(ref_base.floor, 4) + ", sd at it";
  const std::string head_short =
      "floor " + FormatDouble(ref_head.floor, 4) + ", sd " + FormatDouble(ref_head.ratio, 1) + "x";
  const std::string base_words = "seed sd " + FormatDouble(ref_base.sd, 4) +
                                 " sits at the evaluation floor " + FormatDouble(ref_base.floor, 4);
  const std::string head_words = "seed sd " + FormatDouble(ref_head.sd, 4) + " is " +
                                 FormatDouble(ref_head.ratio, 1) + "x the evaluation floor " +
                                 FormatDouble(ref_head.floor, 4);
  const std::string advice = "more seeds will not narrow that spread, a larger evaluation set will";
  auto has = [](const std::string& text, const std::string& what) {
    INFO(text);
    INFO(what);
    CHECK(text.find(what) != std::string::npos);
  };
  auto check_json = [&](const json& f, const stats::NoiseFloor& ref, const std::string& where) {
    INFO(where << ": " << f.dump());
    REQUIRE(f.is_object());
    CHECK(f["eval_examples"].get<double>() == 2000);
    CHECK(f["floor"].get<double>() == Approx(ref.floor));
    CHECK(f["sd"].get<double>() == Approx(ref.sd));
    CHECK(f["p"].get<double>() == Approx(ref.p));
    CHECK(f["sd_ci95"][0].get<double>() == Approx(ref.sd_lo));
    CHECK(f["sd_ci95"][1].get<double>() == Approx(ref.sd_hi));
    CHECK(f["at_floor"] == ref.at_floor);
  };
  auto store = Store::Open(db).value();

  SECTION("trainq show, text and --json") {
    ShowOptions o;
    o.db = db;
    o.repo = work.dir();
    for (const auto& [sha, ref, shortf, words] :
         {std::tuple{base, ref_base, base_short, base_words},
          std::tuple{head, ref_head, head_short, head_words}}) {
      o.commit = sha;
      o.json = false;
      std::ostringstream text;
      REQUIRE(CmdShow(o, text));
      has(text.str(), "(n=6; " + shortf + ")");
      has(text.str(), "    floor:  " + words);
      if (ref.at_floor) has(text.str(), advice);
      o.json = true;
      std::ostringstream js;
      REQUIRE(CmdShow(o, js));
      auto view = json::parse(js.str());
      check_json(view["batches"][0]["progress"]["summary"]["noise_floor"], ref, "show --json");
    }
  }

  SECTION("trainq status, text and --json") {
    StatusOptions o;
    o.db = db;
    std::ostringstream text;
    REQUIRE(CmdStatus(o, clock, text));
    has(text.str(), "(n=6; " + base_short + ")");
    has(text.str(), "(n=6; " + head_short + ")");
    o.json = true;
    std::ostringstream js;
    REQUIRE(CmdStatus(o, clock, js));
    const json doc = json::parse(js.str());
    int seen = 0;
    for (const auto& bj : doc["batches"]) {
      check_json(bj["summary"]["noise_floor"], bj["commit"] == base ? ref_base : ref_head,
                 "status --json");
      ++seen;
    }
    CHECK(seen == 2);
  }

  SECTION("trainq compare and gate, text and --json") {
    CompareCommandOptions o;
    o.db = db;
    o.rev_a = head;
    o.rev_b = base;
    o.repo = work.dir();
    std::ostringstream text;
    REQUIRE(CmdCompare(o, text));
    has(text.str(), "(n=6; " + head_short + ")");
    has(text.str(), "(n=6; " + base_short + ")");
    has(text.str(), "  A floor: " + head_words);
    has(text.str(), "  B floor: " + base_words);
    o.json = true;
    std::ostringstream js;
    REQUIRE(CmdCompare(o, js));
    auto cj = json::parse(js.str()).at(0);
    check_json(cj["a"]["noise_floor"], ref_head, "compare --json a");
    check_json(cj["b"]["noise_floor"], ref_base, "compare --json b");

    GateOptions g;
    g.db = db;
    g.rev = head;
    g.baseline = base;
    g.repo = work.dir();
    std::ostringstream gate;
    REQUIRE(CmdGate(g, gate));
    has(gate.str(), "(n=6; " + head_short + ")");
  }

  SECTION("the PR comment body") {
    PrCommentView view;
    view.forge = "github";
    view.pr_number = 3;
    view.head_sha = head;
    view.target_branch = "main";
    auto at_head = store.runs().BatchesForCommit(head).value();
    for (auto& b : at_head) view.experiments.emplace_back(b, ParentBatch(store, b).value());
    const std::string body = RenderPrComment(view);
    has(body, "± " + FormatDouble(ref_head.sd, 4) + " (" + head_short + ")");
    has(body, "± " + FormatDouble(ref_base.sd, 4) + " (" + base_short + ")");
    has(body, "Evaluation floor, base: " + base_words);
    has(body, "Evaluation floor, head: " + head_words);
  }

  SECTION("the report: markdown and JSON (the dashboard's experiment page reads the JSON)") {
    auto data = BuildReport(store, 0, "all", {}).value();
    const std::string md = RenderMarkdown(data);
    has(md, FormatDouble(ref_base.sd, 4) + " (" + base_short + ")");
    has(md, FormatDouble(ref_head.sd, 4) + " (" + head_short + ")");
    auto report = json::parse(RenderJson(data));
    int seen = 0;
    for (const auto& bj : report["experiments"].at(0)["batches"]) {
      bool at_base = bj["commit"] == base;
      check_json(bj["noise_floor"], at_base ? ref_base : ref_head, "report.json");
      CHECK(bj["noise_floor"]["short"] == (at_base ? base_short : head_short));
      ++seen;
    }
    CHECK(seen == 2);
  }
}

TEST_CASE(
    "the test-set noise floor: a metric that is not a share of examples gets none, and "
    "says why",
    "[verdict][floor]") {
  BatchProgress b;
  b.metric_name = "loss";
  b.values = {1.2, 1.4, 1.3};
  b.eval_examples_min = b.eval_examples_max = 500;
  auto f = NoiseFloorJson(b);
  CHECK(f["floor"].is_null());
  CHECK(f["text"] ==
        "no evaluation floor: the runs report 500 eval examples, but loss is not a "
        "share of examples (a value outside 0..1)");
  CHECK(SpreadText(b) == "loss 1.3000 ± 0.1000 (n=3)");
  // Runs that report different sizes: the floor uses the fewest, and says so.
  b.metric_name = "accuracy";
  b.values = {0.80, 0.82, 0.81};
  b.eval_examples_max = 600;
  f = NoiseFloorJson(b);
  CHECK(f["eval_examples"] == 500);
  CHECK(f["eval_examples_max"] == 600);
  CHECK(f["floor"].get<double>() == Approx(std::sqrt(0.81 * 0.19 / 500)));
  CHECK(f["text"].get<std::string>().find("on 500..600 eval examples") != std::string::npos);
  CHECK(f["text"].get<std::string>().find("the floor uses the fewest") != std::string::npos);
  // No run reported it: no floor anywhere.
  b.eval_examples_min.reset();
  CHECK(NoiseFloorJson(b).is_null());
}
