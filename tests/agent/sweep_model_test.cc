// The model strategies (bayes, tpe), the adaptive-repeats rule as a pure
// function, an adaptive sweep end to end over a real store, and the plots.
#include "agent/results/sweep_model.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <yaml-cpp/yaml.h>
#include <string>

#include "agent/results/sweep.h"
#include "agent/results/sweep_plot.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sweeps.h"
#include "stats/summary.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

using nlohmann::json;

constexpr TimeMs kT0 = 1'700'000'000'000;

SweepSpec Space(const std::string& params, const std::string& extra) {
  std::string text = "version: 1\nexperiments:\n  m:\n    trainer: a.yaml\n    sweep:\n" + extra +
                     "      parameters:\n" + params;
  auto s = LoadSweep(text, "trainq.yaml", "m");
  INFO((s ? "" : s.error().message));
  REQUIRE(s.has_value());
  return *s;
}

TEST_CASE("adaptive repeats: more seeds only while a point could still be the best",
          "[sweep_model]") {
  // Goal max. Leader: point 0 (LCB 0.90 - 1.645 * 0.01 = 0.8836).
  std::vector<PointEstimate> pts = {
      {3, 0.90, 0.01, false},   // leader, contested by point 1
      {3, 0.89, 0.01, false},   // UCB 0.9065 >= 0.8836: could still win
      {3, 0.80, 0.01, false},   // UCB 0.8165: out
      {3, 0.95, 0.10, true},    // could win, but still running
      {10, 0.895, 0.01, false}, // could win, but at the maximum
      {0, 0, 0, false},         // nothing measured
  };
  CHECK(PointsNeedingSeeds(pts, true, 10) == std::vector<std::size_t>{0, 1});
  // Goal min mirrors it.
  std::vector<PointEstimate> mins = {{3, 0.10, 0.01, false}, {3, 0.11, 0.01, false},
                                     {3, 0.30, 0.01, false}};
  CHECK(PointsNeedingSeeds(mins, false, 10) == std::vector<std::size_t>{0, 1});
  // An uncontested leader gets no more.
  std::vector<PointEstimate> clear = {{3, 0.90, 0.01, false}, {3, 0.50, 0.01, false}};
  CHECK(PointsNeedingSeeds(clear, true, 10).empty());
  CHECK(PointsNeedingSeeds({}, true, 10).empty());
}

TEST_CASE("variance of the means shrinks small samples toward the pooled variance",
          "[sweep_model]") {
  std::vector<PointObservation> obs(3);
  obs[0].n = 10, obs[0].var = 0.04;
  obs[1].n = 2, obs[1].var = 0.0;  // two seeds that happened to agree
  obs[2].n = 1, obs[2].var = 0.0;
  auto v = VarianceOfMeans(obs);
  // pooled = (9 * 0.04 + 1 * 0) / 10 = 0.036
  CHECK(v[0] == Approx((9 * 0.04 + 2 * 0.036) / 11 / 10));
  CHECK(v[1] == Approx((0 + 2 * 0.036) / 3 / 2));
  CHECK(v[2] == Approx(0.036 / 1));
}

TEST_CASE("unit encoding round-trips ranges on their scale", "[sweep_model]") {
  auto s = Space("        lr: {log_uniform: [1.0e-4, 1]}\n        w: {int: [16, 512], log: true}\n"
                 "        x: {uniform: [-1, 1]}\n        o: {choice: [a, b, c], strategy: tpe}\n",
                 "      budget: {points: 5}\n");
  CHECK(EncodeUnit(*s.Find("lr"), 0.01) == Approx(0.5));
  CHECK(DecodeUnit(*s.Find("lr"), 0.5).get<double>() == Approx(0.01));
  CHECK(DecodeUnit(*s.Find("w"), 1.0) == 512);
  CHECK(DecodeUnit(*s.Find("w"), 0.0) == 16);
  CHECK(EncodeUnit(*s.Find("x"), 0.0) == Approx(0.5));
  CHECK(EncodeUnit(*s.Find("o"), json("c")) == 2);
}

// A smooth 1-D objective with its maximum at x = 0.7.
double Bump(double x) { return 1.0 - (x - 0.7) * (x - 0.7) * 4; }

TEST_CASE("bayes proposes near the optimum, the same point for the same history",
          "[sweep_model]") {
  auto space = Space("        x: {uniform: [0, 1]}\n",
                     "      budget: {points: 20}\n      strategy: bayes\n      initial: 5\n");
  CHECK(space.Find("x")->model == SweepParam::Model::kBayes);
  std::vector<json> existing;
  SweepHistory h;
  for (double x : {0.05, 0.25, 0.45, 0.9, 0.98}) {
    existing.push_back({{"x", x}});
    PointObservation o;
    o.params = {{"x", x}};
    o.n = 3;
    o.mean = Bump(x);
    o.var = 0.0004;
    h.observed.push_back(o);
  }
  auto next = SuggestPoints(space, existing, 1, 7, h);
  REQUIRE(next.has_value());
  double x = next->at(0)["x"].get<double>();
  CHECK(std::fabs(x - 0.7) < 0.15);
  auto again = SuggestPoints(space, existing, 1, 7, h);
  CHECK(again->at(0).dump() == next->at(0).dump());
  // A batch of three spreads out (points in flight are believed, not repeated).
  auto batch = SuggestPoints(space, existing, 3, 7, h);
  REQUIRE(batch->size() == 3);
  std::set<std::string> distinct;
  for (const auto& p : *batch) distinct.insert(p.dump());
  CHECK(distinct.size() == 3);
}

TEST_CASE("tpe proposes a choice where the good points are", "[sweep_model]") {
  auto space = Space("        o: {choice: [a, b, c, d]}\n        x: {uniform: [0, 1]}\n",
                     "      budget: {points: 40}\n      strategy: tpe\n      initial: 4\n");
  CHECK(space.Find("o")->model == SweepParam::Model::kTpe);
  std::vector<json> existing;
  SweepHistory h;
  const char* opts[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 16; ++i) {
    json p = {{"o", opts[i % 4]}, {"x", (i + 0.5) / 16}};
    existing.push_back(p);
    PointObservation o;
    o.params = p;
    o.n = 2;
    o.mean = (i % 4 == 2 ? 1.0 : 0.0) + 0.01 * i;
    h.observed.push_back(o);
  }
  auto next = SuggestPoints(space, existing, 5, 11, h);
  REQUIRE(next.has_value());
  int c = 0;
  for (const auto& p : *next) c += p["o"] == "c";
  CHECK(c >= 4);
}

CommitInfo Commit() {
  CommitInfo c;
  c.sha = std::string(40, 'b');
  c.message = "adaptive";
  c.committed_ms = kT0;
  return c;
}

TEST_CASE("adaptive sweep: bad points keep their first seeds, the contenders get more",
          "[sweep_model]") {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  auto spec = Space("        lr: {values: [1, 2, 3, 4, 5, 6]}\n",
                    "      parallel: 3\n      repeats: {min: 3, max: 9, step: 3}\n");
  REQUIRE(spec.adaptive());
  BatchSpec base;
  base.experiment = "m";
  base.command = "python3 t.py {lr} --seed {seed}";
  base.repeats = spec.repeats;
  base.seed_start = 1;
  base.metric_goal = "max";
  base.spec_json = json{{"command", base.command}}.dump();
  Sweeps::SweepRow row;
  row.repo_url = "/repo";
  row.commit_json = json{{"sha", Commit().sha}}.dump();
  row.experiment = "m";
  row.spec_json = spec.ToJson().dump();
  row.batch_json = BatchSpecJson(base).dump();
  auto id = *store.sweeps().AddSweep(row, kT0);
  // True means: point lr=5 best (0.90), lr=4 close (0.897), the rest far below.
  std::map<int, double> truth = {{1, 0.5}, {2, 0.6}, {3, 0.7}, {4, 0.897}, {5, 0.90}, {6, 0.4}};
  auto value = [&](const std::string& exp, std::int64_t seed) {
    int idx = std::stoi(exp.substr(exp.rfind('p') + 1));
    double noise = 0.01 * std::sin(static_cast<double>(seed) * 2.3 + idx);
    return truth[idx + 1] + noise;
  };
  for (int round = 0; round < 40; ++round) {
    auto st = StepSweep(store, id, kT0 + round);
    REQUIRE(st.has_value());
    if ((*store.sweeps().GetSweep(id))->state == "done") break;
    auto leased = *store.runs().Lease("w", kT0 + round, 60'000, 1000);
    for (const auto& r : leased) REQUIRE(store.runs().Complete(r.run_id, r.token, kT0 + round, value(r.experiment, r.seed)));
  }
  REQUIRE((*store.sweeps().GetSweep(id))->state == "done");
  auto view = *LoadSweepView(store, id);
  REQUIRE(view.points.size() == 6);
  std::map<double, int> n_by_lr;
  for (const auto& p : view.points) n_by_lr[p.params["lr"].get<double>()] = static_cast<int>(p.summary.n);
  CHECK(n_by_lr[1] == 3);
  CHECK(n_by_lr[6] == 3);
  CHECK(n_by_lr[4] == 9);
  CHECK(n_by_lr[5] == 9);
  auto runs = *store.runs().Runs(std::nullopt, std::nullopt, 0);
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  for (const auto& r : runs) CHECK(seen.insert({r.batch_id, r.seed}).second);
  CHECK(runs.size() < 6u * 9u);
  auto best = PickBest(view);
  REQUIRE(best.winner != nullptr);
  CHECK(best.winner->params["lr"] == 5);

  SECTION("plots: one file per parameter and the progress, well-formed, with the points") {
    auto files = SweepPlots(view);
    REQUIRE(files.count("param-lr.svg") == 1);
    REQUIRE(files.count("progress.svg") == 1);
    for (const auto& [name, svg] : files) {
      INFO(name);
      CHECK(svg.rfind("<?xml", 0) == 0);
      CHECK(svg.find("</svg>") != std::string::npos);
      // Balanced tags: every <g> closed.
      std::size_t open = 0, close = 0;
      for (std::size_t at = 0; (at = svg.find("<g", at)) != std::string::npos; ++at) ++open;
      for (std::size_t at = 0; (at = svg.find("</g>", at)) != std::string::npos; ++at) ++close;
      CHECK(open == close);
    }
    const auto& lr = files["param-lr.svg"];
    std::size_t circles = 0;
    for (std::size_t at = 0; (at = lr.find("class=\"point\"", at)) != std::string::npos; ++at) ++circles;
    CHECK(circles == 6);
    CHECK(lr.find("point 4: n=9") != std::string::npos);
  }
}


// A view of 12 measured points: `depth` (a grid of 4) decides the mean,
// `noise` (a range) is drawn independently of it and does not.
SweepView ImportanceFixture() {
  SweepView v;
  v.row.id = 3;
  v.metric = "accuracy";
  v.goal = "max";
  SweepParam depth;
  depth.name = "depth";
  depth.kind = ParamKind::kValues;
  depth.grid = true;
  depth.options = {1, 2, 3, 4};
  SweepParam noise;
  noise.name = "noise";
  noise.kind = ParamKind::kLogUniform;
  noise.lo = 0.001;
  noise.hi = 1;
  SweepParam fixed;
  fixed.name = "epochs";
  fixed.kind = ParamKind::kValue;
  fixed.options = {10};
  v.spec.params = {depth, noise, fixed};
  const double noises[12] = {0.5, 0.002, 0.03, 0.9, 0.01, 0.2, 0.004, 0.07, 0.6, 0.05, 0.003, 0.3};
  for (int i = 0; i < 12; ++i) {
    int d = 1 + i % 4;
    std::vector<double> values;
    for (int seed = 0; seed < 3; ++seed) values.push_back(0.6 + 0.08 * d + 0.004 * std::sin(i * 3.1 + seed));
    PointResult p;
    p.idx = i;
    p.params = json{{"depth", d}, {"noise", noises[i]}, {"epochs", 10}};
    p.summary = stats::Summarize(values);
    p.bound = stats::MeanInterval(p.summary, 0.90)->lo;
    BatchProgress b;
    b.id = i + 1;
    b.metric_goal = "max";
    b.values = values;
    b.seeds = {1, 2, 3};
    p.batch = b;
    p.state = "done";
    v.points.push_back(p);
  }
  PointResult queued;
  queued.idx = 12;
  queued.params = json{{"depth", 2}, {"noise", 0.1}, {"epochs", 10}};
  queued.state = "queued";
  v.points.push_back(queued);
  return v;
}

TEST_CASE("sweep importance: the parameter that decides the mean explains it, the other does not",
          "[sweep][plot]") {
  auto v = ImportanceFixture();
  auto imp = SweepImportance(v);
  REQUIRE(imp.size() == 2);  // `value` parameters are not searched
  CHECK(imp[0].name == "depth");
  CHECK(imp[0].groups == 4);
  CHECK(imp[0].points == 12);  // the queued point has no mean
  CHECK(imp[0].eta2 > 0.9);  // 135/143 on ranks
  CHECK(imp[1].name == "noise");
  CHECK(imp[1].groups == 4);  // four bins of three points on the log scale
  CHECK(imp[1].eta2 < 0.3);

  SECTION("too few points: nothing to say") {
    v.points.resize(2);
    CHECK(SweepImportance(v).empty());
  }
}

TEST_CASE("sweep plots: parallel coordinates draw a line per measured point, the leader last",
          "[sweep][plot]") {
  auto v = ImportanceFixture();
  auto files = SweepPlots(v);
  REQUIRE(files.count("parallel.svg") == 1);
  REQUIRE(files.count("importance.svg") == 1);
  const auto& par = files["parallel.svg"];
  std::vector<std::string> titles;
  for (std::size_t at = 0; (at = par.find("<polyline class=\"point\"", at)) != std::string::npos; ++at) {
    auto t = par.find("<title>", at);
    titles.push_back(par.substr(t + 7, par.find("</title>", t) - t - 7));
  }
  REQUIRE(titles.size() == 12);
  auto best = PickBest(v);
  REQUIRE(best.winner != nullptr);
  CHECK(best.winner->params["depth"] == 4);
  CHECK_THAT(titles.back(), Catch::StartsWith("point " + std::to_string(best.winner->idx) + ":"));
  CHECK_THAT(titles.back(), Catch::EndsWith("(leader)"));
  // Axes: depth, noise on the log scale and the metric; none for `epochs`.
  CHECK(par.find(">depth<") != std::string::npos);
  CHECK(par.find(">noise (log)<") != std::string::npos);
  CHECK(par.find(">accuracy (mean)<") != std::string::npos);
  CHECK(par.find("epochs") == std::string::npos);
  const auto& imp = files["importance.svg"];
  std::size_t bars = 0;
  for (std::size_t at = 0; (at = imp.find("class=\"bar\"", at)) != std::string::npos; ++at) ++bars;
  CHECK(bars == 2);
  CHECK(imp.find("depth: eta squared") != std::string::npos);
}

TEST_CASE("sweep text: parameters to 4 significant digits, the winner in words", "[sweep]") {
  CHECK(ShortParamsText(json{{"lr", 0.031218529809207054}, {"width", 64}, {"act", "relu"}}) ==
        "act=relu lr=0.03122 width=64");
  auto v = ImportanceFixture();
  auto best = PickBest(v);
  auto lines = WinnerLines(v, best);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0], Catch::StartsWith("point " + std::to_string(best.winner->idx) + ": depth=4"));
  CHECK_THAT(lines[1], Catch::StartsWith("accuracy 0.9"));
  CHECK_THAT(lines[1], Catch::EndsWith("(mean [95% CI], n=3)"));
  CHECK_THAT(lines[2], Catch::StartsWith("vs point "));
  CHECK(WinnerLines(v, SweepBest{}).empty());
}

TEST_CASE("sweep best --as yaml: nested spec keys for a trainer, the filled command otherwise",
          "[sweep]") {
  json params = {{"optimizer.lr", 0.0123}, {"model.width", 64}, {"trainer.shuffle", true},
                 {"model.act", "relu"}};
  auto trainer = WinnerPatch("mlp", json{{"trainer", "configs/mlp.yaml"}}, params);
  INFO(trainer);
  CHECK_THAT(trainer, Catch::StartsWith("# merge into configs/mlp.yaml"));
  auto y = YAML::Load(trainer);
  CHECK(y["optimizer"]["lr"].as<double>() == 0.0123);
  CHECK(y["model"]["width"].as<int>() == 64);
  CHECK(y["model"]["act"].as<std::string>() == "relu");
  CHECK(y["trainer"]["shuffle"].as<bool>() == true);

  auto command = WinnerPatch("mlp", json{{"command", "python3 t.py --lr {lr} --act {act} --seed {seed}"}},
                             json{{"lr", 0.5}, {"act", "it's"}});
  INFO(command);
  auto c = YAML::Load(command);
  CHECK(c["experiments"]["mlp"]["command"].as<std::string>() ==
        "python3 t.py --lr '0.5' --act 'it'\\''s' --seed {seed}");
}

}  // namespace
}  // namespace trainq
