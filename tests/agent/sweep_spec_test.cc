// `sweep:` in trainq.yaml: every parameter type parses, every mistake names
// file:line and the key path, and the manifest (so the submission) fails.
#include "agent/repo/sweep_spec.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/repo/manifest.h"

namespace trainq {
namespace {

using nlohmann::json;

// A manifest whose experiment `m` runs `command` with `sweep` (indented by 6).
std::string Yaml(const std::string& sweep,
                 const std::string& command = "python3 t.py --lr {lr} --seed {seed}") {
  return "version: 1\n"
         "experiments:\n"
         "  m:\n"
         "    command: " + command + "\n"
         "    sweep:\n" + sweep;
}

std::string ErrorOf(const std::string& text) {
  auto m = ParseManifest(text, "trainq.yaml");
  INFO(text);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().kind == ErrorKind::kInvalidArgument);
  return m.error().message;
}

TEST_CASE("sweep spec: every parameter type parses", "[sweep]") {
  std::string text = Yaml(R"Y(      budget: {points: 12}
      parallel: 3
      repeats: 4
      seed: 7
      parameters:
        lr:     {log_uniform: [1.0e-4, 0.3]}
        wd:     {uniform: [0, 0.1]}
        width:  {int: [16, 512], log: true}
        depth:  {int: [1, 4]}
        opt:    {choice: [sgd, adam]}
        bs:     {values: [32, 64, 128]}
        act:    {choice: [relu, gelu], strategy: grid}
        drop:   {values: [0.1, 0.2], strategy: random}
        epochs: {value: 10}
        min_lr: {expr: "lr / 100 + min(wd, 0.01) * int(2.7)"}
      points:
        - {lr: 0.001, wd: 0, width: 64, depth: 2, opt: adam, bs: 32, act: relu, drop: 0.1}
)Y",
                          "python3 t.py {lr} {wd} {width} {depth} {opt} {bs} {act} {drop} "
                          "{epochs} {min_lr} --seed {seed}");
  auto m = ParseManifest(text, "trainq.yaml");
  INFO((m ? "" : m.error().message));
  REQUIRE(m.has_value());
  auto s = LoadSweep(text, "trainq.yaml", "m");
  REQUIRE(s.has_value());
  CHECK(*s->budget_points == 12);
  CHECK(s->parallel == 3);
  CHECK(s->repeats == 4);
  CHECK(s->seed == 7);
  REQUIRE(s->params.size() == 10);
  CHECK(s->Find("lr")->kind == ParamKind::kLogUniform);
  CHECK(s->Find("lr")->lo == 1.0e-4);
  CHECK(s->Find("lr")->hi == 0.3);
  CHECK(s->Find("wd")->kind == ParamKind::kUniform);
  CHECK(s->Find("width")->kind == ParamKind::kInt);
  CHECK(s->Find("width")->log);
  CHECK_FALSE(s->Find("depth")->log);
  CHECK(s->Find("opt")->kind == ParamKind::kChoice);
  CHECK_FALSE(s->Find("opt")->grid);  // choice: random by default
  CHECK(s->Find("bs")->grid);         // values: grid by default
  CHECK(s->Find("bs")->options == std::vector<json>{32, 64, 128});
  CHECK(s->Find("act")->grid);
  CHECK_FALSE(s->Find("drop")->grid);
  CHECK(s->Find("epochs")->options == std::vector<json>{10});
  CHECK(s->Find("min_lr")->expr == "lr / 100 + min(wd, 0.01) * int(2.7)");
  CHECK(s->GridSize() == 6);
  REQUIRE(s->points.size() == 1);
  CHECK(s->points[0]["opt"] == "adam");
  CHECK(s->points[0]["lr"] == 0.001);
  CHECK(s->PointBudget() == 12);
  // The sweep is not part of the experiment's inputs.
  CHECK(m->experiments[0].definition.find("sweep") == std::string::npos);
  // Stored and read back unchanged.
  auto back = SweepSpec::FromJson(s->ToJson());
  REQUIRE(back.has_value());
  CHECK(back->ToJson() == s->ToJson());
}

TEST_CASE("sweep spec: budget in runs, and a pure grid needs no budget", "[sweep]") {
  auto runs = LoadSweep(Yaml("      repeats: 3\n      budget: {runs: 10}\n"
                             "      parameters:\n        lr: {uniform: [0, 1]}\n"),
                        "trainq.yaml", "m");
  REQUIRE(runs.has_value());
  CHECK(runs->PointBudget() == 4);  // ceil(10 / 3)
  auto grid = LoadSweep(Yaml("      parameters:\n        lr: {values: [1, 2, 3]}\n"),
                        "trainq.yaml", "m");
  REQUIRE(grid.has_value());
  CHECK(grid->PointBudget() == 3);
}

TEST_CASE("sweep spec: mistakes name file, line and key, nothing parses", "[sweep][errors]") {
  struct Case {
    std::string sweep;
    std::string want;
  };
  const std::string P = "      budget: {points: 4}\n      parameters:\n";
  const std::vector<Case> cases = {
      {"      budget: {points: 4}\n      bogus: 1\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "trainq.yaml:7: experiments.m.sweep.bogus: unknown key"},
      {"      budget: {points: 4}\n",
       "experiments.m.sweep.parameters: missing"},
      {P + "        lr: {uniform: [1, 0]}\n",
       "trainq.yaml:8: experiments.m.sweep.parameters.lr.uniform: low must be below high"},
      {P + "        lr: {uniform: [1, 1]}\n", "low must be below high"},
      {P + "        lr: {uniform: [a, 1]}\n",
       "experiments.m.sweep.parameters.lr.uniform: expected a number, got \"a\""},
      {P + "        lr: {uniform: 3}\n", "expected [low, high]"},
      {P + "        lr: {log_uniform: [0, 1]}\n",
       "trainq.yaml:8: experiments.m.sweep.parameters.lr.log_uniform: bounds must be > 0"},
      {P + "        lr: {log_uniform: [-1, 1]}\n", "bounds must be > 0"},
      {P + "        lr: {int: [1.5, 4]}\n", "parameters.lr.int: expected an integer"},
      {P + "        lr: {int: [0, 4], log: true}\n", "bounds must be > 0 with log: true"},
      {P + "        lr: {int: [1, 4], log: maybe}\n", "parameters.lr.log: expected true or false"},
      {P + "        lr: {uniform: [0, 1], log: true}\n", "parameters.lr.log: only for int"},
      {P + "        lr: {choice: []}\n", "parameters.lr.choice: must not be empty"},
      {P + "        lr: {values: []}\n", "parameters.lr.values: must not be empty"},
      {P + "        lr: {choice: 3}\n", "parameters.lr.choice: expected a list"},
      {P + "        lr: {choice: [[1]]}\n", "expected plain values"},
      {P + "        lr: {value: [1]}\n", "parameters.lr.value: expected a plain value"},
      {P + "        lr: {}\n", "parameters.lr: needs one of"},
      {"      failed_points: skip\n" + P + "        lr: {uniform: [0, 1]}\n",
       "trainq.yaml:6: experiments.m.sweep.failed_points: expected exclude or worst, got skip"},
      {"      confirm: -1\n" + P + "        lr: {uniform: [0, 1]}\n",
       "trainq.yaml:6: experiments.m.sweep.confirm: "},
      {"      confirm: 3\n      repeats: {min: 2, max: 6}\n" + P + "        lr: {uniform: [0, 1]}\n",
       "trainq.yaml:6: experiments.m.sweep.confirm: applies to fixed repeats"},
      {"      confirm: 3\n      repeats: 3\n      budget: {runs: 5}\n      parameters:\n"
       "        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.budget.runs: smaller than one point's repeats plus confirm (6)"},
      {P + "        lr: 0.1\n", "parameters.lr: expected a mapping"},
      {P + "        lr: {uniform: [0, 1], choice: [1]}\n", "has more than one of"},
      {P + "        lr: {uniform: [0, 1], color: red}\n",
       "trainq.yaml:8: experiments.m.sweep.parameters.lr.color: unknown key"},
      {P + "        lr: {uniform: [0, 1], strategy: grid}\n", "grid needs a finite list"},
      {P + "        lr: {values: [1, 2], strategy: bayes}\n",
       "trainq.yaml:8: experiments.m.sweep.parameters.lr.strategy: bayes models a range"},
      {P + "        lr: {values: [1, 2], strategy: sobol}\n",
       "expected random, grid, bayes or tpe, got \"sobol\""},
      {P + "        lr: {expr: \"x / 2\"}\n",
       "parameters.lr.expr: unknown name 'x'"},
      {P + "        lr: {expr: \"1 +\"}\n", "parameters.lr.expr: expression \"1 +\""},
      {P + "        lr: {expr: \"system(1)\"}\n", "unknown function 'system'"},
      {P + "        lr: {expr: \"1; rm -rf /\"}\n", "unexpected ';'"},
      {P + "        lr: {uniform: [0, 1]}\n        a: {choice: [x, y]}\n"
           "        b: {expr: \"a * 2\"}\n",
       "'a' is not numeric"},
      {P + "        lr: {uniform: [0, 1]}\n        lr: {uniform: [0, 2]}\n", ""},  // YAML dup
      {"      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.budget: missing: 'lr' is drawn at random"},
      {"      budget: {points: 0}\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.budget.points: expected an integer of at least 1"},
      {"      budget: {trials: 3}\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.budget.trials: unknown key"},
      {"      budget: {runs: 2}\n      repeats: 3\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "budget.runs: smaller than one point's repeats (3)"},
      {"      budget: {points: 2}\n      parallel: 0\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.parallel: expected an integer of at least 1"},
      {"      budget: {points: 2}\n      repeats: two\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.repeats: expected a number, got \"two\""},
      {"      budget: {points: 2}\n      seed: -1\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.seed: expected an integer of at least 0"},
      {"      budget: {points: 2}\n      strategy: gp\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.strategy: expected random, grid, bayes or tpe, got \"gp\""},
      {"      budget: {points: 2}\n      repeats: {max: 5}\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.repeats: expected {min: N}"},
      {"      budget: {points: 2}\n      repeats: {min: 5, max: 3}\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.repeats.max: smaller than min"},
      {"      budget: {points: 2}\n      repeats: {min: 2, most: 3}\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.repeats.most: unknown key"},
      {"      budget: {points: 2}\n      initial: 0\n      parameters:\n        lr: {uniform: [0, 1]}\n",
       "experiments.m.sweep.initial: expected an integer of at least 1"},
      {P + "        lr: {uniform: [0, 1]}\n      points:\n        - {lr: 2}\n",
       "trainq.yaml:10: experiments.m.sweep.points.lr: outside the bounds"},
      {P + "        lr: {uniform: [0, 1]}\n      points:\n        - {momentum: 2}\n",
       "experiments.m.sweep.points.momentum: not a parameter of this sweep"},
      {P + "        lr: {uniform: [0, 1]}\n        e: {value: 3}\n      points:\n        - {e: 2}\n",
       "points.e: is derived or fixed"},
      {P + "        lr: {uniform: [0, 1]}\n        o: {choice: [a]}\n      points:\n        - {lr: 0.5}\n",
       "experiments.m.sweep.points: missing a value for 'o'"},
      {P + "        lr: {uniform: [0, 1]}\n      points: {lr: 1}\n",
       "experiments.m.sweep.points: expected a list"},
      {"      - 1\n", "experiments.m.sweep: expected a mapping"},
  };
  for (const auto& c : cases) {
    std::string msg = ErrorOf(Yaml(c.sweep));
    INFO(c.sweep);
    CHECK_THAT(msg, Catch::StartsWith("trainq.yaml:"));
    CHECK_THAT(msg, Catch::Contains(c.want));
  }
}

TEST_CASE("sweep spec: a command's placeholders and the parameters must match",
          "[sweep][errors]") {
  std::string sweep = "      budget: {points: 2}\n      parameters:\n        lr: {uniform: [0, 1]}\n";
  CHECK_THAT(ErrorOf(Yaml(sweep, "python3 t.py {lr} {momentum} --seed {seed}")),
             Catch::Contains("trainq.yaml:8: experiments.m.sweep.parameters: the command has a "
                             "placeholder {momentum} that is not a parameter"));
  CHECK_THAT(ErrorOf(Yaml(sweep, "python3 t.py --seed {seed}")),
             Catch::Contains("trainq.yaml:8: experiments.m.sweep.parameters.lr: the command has "
                             "no {lr}"));
  // A trainer spec takes --set paths: no placeholders to match.
  std::string trainer = "version: 1\nexperiments:\n  m:\n    trainer: configs/a.yaml\n"
                        "    sweep:\n" + sweep;
  CHECK(ParseManifest(trainer, "trainq.yaml").has_value());
}

TEST_CASE("sweep expressions: arithmetic, functions, names, nothing else", "[sweep]") {
  std::map<std::string, double> v = {{"optimizer.lr", 0.02}, {"w", 3}};
  CHECK(*EvalExpr("optimizer.lr / 100", v) == Approx(0.0002));
  CHECK(*EvalExpr("-(w + 1) * 2 - 1", v) == -9);
  CHECK(*EvalExpr("min(w, 2) + max(w, 2)", v) == 5);
  CHECK(*EvalExpr("exp(log(w))", v) == Approx(3));
  CHECK(*EvalExpr("int(w / 2)", v) == 1);
  CHECK(*EvalExpr("1.5e1", v) == 15);
  CHECK_FALSE(EvalExpr("w / 0", v).has_value());
  CHECK_FALSE(EvalExpr("log(0)", v).has_value());
  CHECK_FALSE(EvalExpr("min(1)", v).has_value());
  CHECK_FALSE(EvalExpr("$(w)", v).has_value());
  CHECK_FALSE(EvalExpr("`w`", v).has_value());
  CHECK_FALSE(EvalExpr("w w", v).has_value());
  auto names = ExprNames("a.b * min(c, 2) + c");
  REQUIRE(names.has_value());
  CHECK(*names == std::vector<std::string>{"a.b", "c", "c"});
}

}  // namespace
}  // namespace trainq
