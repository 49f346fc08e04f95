#include "agent/repo/manifest.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

namespace trainq {
namespace {

// Parses `text` and returns the error message; fails the test when it parses.
std::string ErrorOf(const std::string& text) {
  auto m = ParseManifest(text, "trainq.yaml");
  INFO(text);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().kind == ErrorKind::kInvalidArgument);
  return m.error().message;
}

TEST_CASE("manifest: a valid file inherits defaults and lets experiments override them",
          "[manifest]") {
  const char* text = R"(# comment
version: 1
defaults:
  repeats: 5
  seed: 100
  metric: {name: loss, goal: min}
  timeout: 15m
  max_attempts: 2
  resources: {gpus: 1}
experiments:
  base:
    command: python3 train.py --seed {seed}
  lstm:
    command: python3 lstm.py
    watch: [lstm.py, "data/**"]
    repeats: 20
    seed: 0
    metric: {regex: 'acc=([0-9.]+)'}
    timeout: 1h30m
    max_attempts: 4
    resources: {gpus: 0}
  spec:
    trainer: specs/resnet.yaml
    watch: specs/**
)";
  auto m = ParseManifest(text, "trainq.yaml");
  REQUIRE(m.has_value());
  CHECK(m->version == 1);
  REQUIRE(m->experiments.size() == 3);
  CHECK(m->Names() == std::vector<std::string>{"base", "lstm", "spec"});
  CHECK_FALSE(m->defaults_definition.empty());

  const Experiment* base = m->Find("base");
  REQUIRE(base != nullptr);
  CHECK(base->line == 11);
  CHECK(base->command == "python3 train.py --seed {seed}");
  CHECK(base->trainer.empty());
  CHECK(base->repeats == 5);
  CHECK(base->seed == 100);
  CHECK(base->metric.name == "loss");
  CHECK(base->metric.goal == "min");
  CHECK(base->metric.regex.empty());
  CHECK(base->timeout_s == 15 * 60);
  CHECK(base->max_attempts == 2);
  CHECK(base->gpus == 1);
  CHECK(base->watch.empty());
  CHECK_FALSE(base->definition.empty());

  const Experiment* lstm = m->Find("lstm");
  REQUIRE(lstm != nullptr);
  CHECK(lstm->line == 13);
  CHECK(lstm->repeats == 20);
  CHECK(lstm->seed == 0);
  // A partial metric keeps the inherited name and goal.
  CHECK(lstm->metric.name == "loss");
  CHECK(lstm->metric.goal == "min");
  CHECK(lstm->metric.regex == "acc=([0-9.]+)");
  CHECK(lstm->timeout_s == 5400);
  CHECK(lstm->max_attempts == 4);
  CHECK(lstm->gpus == 0);
  CHECK(lstm->watch == std::vector<std::string>{"lstm.py", "data/**"});
  CHECK(lstm->definition != base->definition);

  const Experiment* spec = m->Find("spec");
  REQUIRE(spec != nullptr);
  CHECK(spec->trainer == "specs/resnet.yaml");
  CHECK(spec->command.empty());
  CHECK(spec->watch == std::vector<std::string>{"specs/**"});

  CHECK(m->Find("nope") == nullptr);
}

TEST_CASE("manifest: built-in defaults apply without a defaults section", "[manifest]") {
  auto m = ParseManifest("version: 1\nexperiments:\n  a:\n    command: ./run.sh\n", "trainq.yaml");
  REQUIRE(m.has_value());
  REQUIRE(m->experiments.size() == 1);
  const auto& e = m->experiments[0];
  CHECK(e.repeats == 10);
  CHECK(e.seed == 1);
  CHECK(e.metric.name == "accuracy");
  CHECK(e.metric.goal == "max");
  CHECK(e.timeout_s == 7200);
  CHECK(e.max_attempts == 3);
  CHECK(e.gpus == 0);
  CHECK(m->defaults_definition.empty());
}

TEST_CASE("manifest: metric given as a bare name", "[manifest]") {
  auto m = ParseManifest("version: 1\nexperiments:\n  a:\n    command: x\n    metric: f1\n",
                         "trainq.yaml");
  REQUIRE(m.has_value());
  CHECK(m->experiments[0].metric.name == "f1");
  CHECK(m->experiments[0].metric.goal == "max");
}

TEST_CASE("manifest: ResolvedCommand and ToBatchSpec", "[manifest]") {
  auto m = ParseManifest(R"(version: 1
experiments:
  cmd:
    command: python3 train.py --seed {seed}
    repeats: 7
    seed: 3
    metric: {name: loss, goal: min, regex: 'loss ([0-9.]+)'}
    timeout: 90s
    max_attempts: 5
    resources: {gpus: 2}
    watch: [train.py]
  tr:
    trainer: specs/my spec.yaml
)",
                         "trainq.yaml");
  REQUIRE(m.has_value());
  const Experiment* cmd = m->Find("cmd");
  const Experiment* tr = m->Find("tr");
  REQUIRE(cmd);
  REQUIRE(tr);
  CHECK(cmd->ResolvedCommand() == "python3 train.py --seed {seed}");
  // A trainer runs trainq-train with the spec path quoted for the shell.
  CHECK(tr->ResolvedCommand() == "trainq-train 'specs/my spec.yaml'");

  BatchSpec b = cmd->ToBatchSpec("because");
  CHECK(b.experiment == "cmd");
  CHECK(b.command == "python3 train.py --seed {seed}");
  CHECK(b.metric_name == "loss");
  CHECK(b.metric_goal == "min");
  CHECK(b.metric_regex == "loss ([0-9.]+)");
  CHECK(b.repeats == 7);
  CHECK(b.seed_start == 3);
  CHECK(b.gpus == 2);
  CHECK(b.timeout_s == 90);
  CHECK(b.max_attempts == 5);
  CHECK(b.reason == "because");
  auto j = nlohmann::json::parse(b.spec_json);
  CHECK(j["command"] == "python3 train.py --seed {seed}");
  CHECK(j["trainer"] == "");
  CHECK(j["repeats"] == 7);
  CHECK(j["seed"] == 3);
  CHECK(j["metric"]["name"] == "loss");
  CHECK(j["metric"]["goal"] == "min");
  CHECK(j["metric"]["regex"] == "loss ([0-9.]+)");
  CHECK(j["resources"]["gpus"] == 2);
  CHECK(j["timeout_s"] == 90);
  CHECK(j["max_attempts"] == 5);
  CHECK(j["watch"] == nlohmann::json::array({"train.py"}));

  BatchSpec t = tr->ToBatchSpec("r");
  CHECK(t.command == "trainq-train 'specs/my spec.yaml'");
  CHECK(nlohmann::json::parse(t.spec_json)["trainer"] == "specs/my spec.yaml");
}

TEST_CASE("manifest: repeats that is not a positive integer", "[manifest][errors]") {
  const char* text = R"(version: 1
experiments:
  base:
    command: ./a
  lstm:
    command: ./b
    repeats: ten
)";
  CHECK(ErrorOf(text) ==
        "trainq.yaml:7: experiments.lstm.repeats: expected a positive integer, got \"ten\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats: 0\n") ==
        "trainq.yaml:5: experiments.a.repeats: expected a positive integer, got \"0\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats: -3\n") ==
        "trainq.yaml:5: experiments.a.repeats: expected a positive integer, got \"-3\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats: 2.5\n") ==
        "trainq.yaml:5: experiments.a.repeats: expected a positive integer, got \"2.5\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats: [1, 2]\n") ==
        "trainq.yaml:5: experiments.a.repeats: expected a positive integer, got a list");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats: 100001\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.repeats: at most 100000"));
}

TEST_CASE("manifest: the same checks apply in defaults", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\ndefaults:\n  repeats: many\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:3: defaults.repeats: expected a positive integer, got \"many\"");
  CHECK(ErrorOf("version: 1\ndefaults:\n  seed: -1\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:3: defaults.seed: expected a non-negative integer, got \"-1\"");
  CHECK_THAT(
      ErrorOf("version: 1\ndefaults:\n  command: x\nexperiments:\n  a:\n    command: x\n"),
      Catch::StartsWith("trainq.yaml:3: defaults.command: unknown key (expected one of:"));
  CHECK(ErrorOf("version: 1\ndefaults: 3\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:2: defaults: expected a mapping, got \"3\"");
}

TEST_CASE("manifest: an unknown key (a typo) names the key and the allowed ones",
          "[manifest][errors]") {
  const char* text = R"(version: 1
experiments:
  lstm:
    command: ./train
    repeat: 10
)";
  auto msg = ErrorOf(text);
  CHECK_THAT(msg, Catch::StartsWith("trainq.yaml:5: experiments.lstm.repeat: unknown key "
                                    "(expected one of: "));
  CHECK_THAT(msg, Catch::Contains("repeats"));

  CHECK_THAT(ErrorOf("version: 1\nexperimnets:\n  a:\n    command: x\n"),
             Catch::StartsWith("trainq.yaml:2: experimnets: unknown key"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    metric: {nam: acc}\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.metric.nam: unknown key"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                     "    resources:\n      gpu: 1\n"),
             Catch::StartsWith("trainq.yaml:6: experiments.a.resources.gpu: unknown key"));
}

TEST_CASE("manifest: version missing, unsupported or malformed", "[manifest][errors]") {
  CHECK(ErrorOf("experiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:1: version: missing (write `version: 1`)");
  CHECK(ErrorOf("# top\nversion: 2\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:2: version: unsupported version 2 (this trainq reads version 1)");
  CHECK(ErrorOf("version: one\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:1: version: expected 1, got \"one\"");
}

TEST_CASE("manifest: invalid YAML syntax gives the line", "[manifest][errors]") {
  const char* text = R"(version: 1
experiments:
  a:
    command: x
    metric: {name: acc, goal: max
  b:
    command: y
)";
  auto msg = ErrorOf(text);
  CHECK_THAT(msg, Catch::Contains("invalid YAML"));
  // The flow mapping opened on line 5 is never closed: the parser notices on line 5 or later.
  CHECK_THAT(msg, Catch::Matches("trainq\\.yaml:[5-8]: invalid YAML: .*"));

  // A list item where a key was due.
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n  - b\n") ==
        "trainq.yaml:5: invalid YAML: end of map not found");
  // A tab in the indentation.
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n\tcommand: x\n"),
             Catch::StartsWith("trainq.yaml:4: invalid YAML: "));
}

TEST_CASE("manifest: an open quote at the end of the file is refused, with or without a "
          "last line break",
          "[manifest][errors]") {
  for (const char* end : {"\n", "", "\n\n", "\r\n"}) {
    INFO("file ends with " << end);
    auto msg = ErrorOf(std::string("version: 1\nexperiments:\n  a:\n    command: \"./train.sh "
                                   "{seed}") +
                       end);
    CHECK_THAT(msg, Catch::Matches("trainq\\.yaml:[45]: invalid YAML: .*"));
  }
  // A closed quote, and a comment or a block scalar as the last line: as before.
  auto ok = ParseManifest("version: 1\nexperiments:\n  a:\n    command: \"./t.sh {seed}\"\n"
                          "# the end",
                          "trainq.yaml");
  REQUIRE(ok);
  CHECK(ok->experiments.at(0).command == "./t.sh {seed}");
  auto block = ParseManifest("version: 1\nexperiments:\n  a:\n    command: |\n      ./t.sh "
                             "{seed}\n",
                             "trainq.yaml");
  REQUIRE(block);
  CHECK(block->experiments.at(0).command == "./t.sh {seed}\n");
}

TEST_CASE("manifest: an alias bomb is refused at once, before it is expanded",
          "[manifest][errors]") {
  // 10 values, then 7 levels of 10 aliases each: 10^8 values once expanded.
  std::string text = "version: 1\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", " : "") + prev;
    text += "]\n";
  }
  text += "experiments:\n  a:\n    command: x\n";
  auto t0 = std::chrono::steady_clock::now();
  auto msg = ErrorOf(text);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK_THAT(msg, Catch::Contains("trainq.yaml: more than 200000 values once its aliases"));
  // Refused before the 10^8 values are walked (that took 20 s).
  CHECK(took < std::chrono::seconds(2));
  // Aliases of a normal size are fine.
  auto ok = ParseManifest("version: 1\nexperiments:\n  a: &base\n    command: x {seed}\n  b: "
                          "*base\n",
                          "trainq.yaml");
  REQUIRE(ok);
  CHECK(ok->experiments.at(1).command == "x {seed}");
}

TEST_CASE("manifest: the top level must be a mapping", "[manifest][errors]") {
  CHECK_THAT(ErrorOf("- a\n- b\n"), Catch::StartsWith("trainq.yaml:1: expected a mapping"));
  CHECK_THAT(ErrorOf(""), Catch::StartsWith("trainq.yaml:1: expected a mapping"));
}

TEST_CASE("manifest: an experiment needs exactly one of command and trainer",
          "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n  b:\n    command: y\n"
                "    trainer: t.yaml\n") ==
        "trainq.yaml:5: experiments.b: has both `command` and `trainer`; keep one");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    repeats: 3\n") ==
        "trainq.yaml:3: experiments.a: needs `command` (a shell command) or `trainer` (a spec)");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: [x, y]\n") ==
        "trainq.yaml:4: experiments.a.command: expected a string, got a list");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a: ./run.sh\n") ==
        "trainq.yaml:3: experiments.a: expected a mapping, got \"./run.sh\"");
}

TEST_CASE("manifest: a bad duration", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    timeout: soon\n") ==
        "trainq.yaml:5: experiments.a.timeout: expected a duration such as 90s, 15m, 2h or 1d, "
        "got \"soon\"");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    timeout: 1h30\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.timeout: expected a duration"));
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    timeout: 0s\n") ==
        "trainq.yaml:5: experiments.a.timeout: expected a positive duration, got \"0s\"");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    timeout: [1m]\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.timeout: expected a duration"));
}

TEST_CASE("manifest: metric goal, name and regex", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                "    metric:\n      name: acc\n      goal: maximise\n") ==
        "trainq.yaml:7: experiments.a.metric.goal: expected max or min, got \"maximise\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                "    metric: {regex: 'acc=[0-9.]+'}\n") ==
        "trainq.yaml:5: experiments.a.metric.regex: needs one capture group around the number, "
        "e.g. 'acc=([0-9.]+)'");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                     "    metric: {regex: 'acc=([0-9.]+'}\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.metric.regex: invalid regular "
                               "expression"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    metric: [acc]\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.metric: expected a name or"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    metric: {name: ''}\n"),
             Catch::Contains("experiments.a.metric.name: must not be empty"));
}

TEST_CASE("manifest: a bad experiment name", "[manifest][errors]") {
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  ok:\n    command: x\n  \"my exp\":\n"
                     "    command: y\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.my exp: experiment names use letters"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  -dash:\n    command: y\n"),
             Catch::StartsWith("trainq.yaml:3: experiments.-dash: experiment names use letters"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a/b:\n    command: y\n"),
             Catch::StartsWith("trainq.yaml:3: experiments.a/b: experiment names"));
}

TEST_CASE("manifest: experiments missing or empty", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\n") ==
        "trainq.yaml:1: experiments: missing (at least one experiment)");
  CHECK(ErrorOf("version: 1\nexperiments: {}\n") ==
        "trainq.yaml:2: experiments: expected a mapping of experiment names to definitions");
  CHECK_THAT(ErrorOf("version: 1\nexperiments: []\n"),
             Catch::StartsWith("trainq.yaml:2: experiments: expected a mapping"));
}

TEST_CASE("manifest: a key given no value is reported on its own line",
          "[manifest][errors]") {
  // Regression (fixed): Parser::Err (agent/repo/manifest.cc) takes the line from the value node's
  // Mark(); for an empty value (`experiments:` or `repeats:` with nothing after
  // it) yaml-cpp marks the position of the *next* token, so the message names the
  // following line (or a line past the end of the file). Expected: the key's line.
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n"),
             Catch::StartsWith("trainq.yaml:2: experiments: expected a mapping"));
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\ndefaults:\n  seed: 3\n"),
             Catch::StartsWith("trainq.yaml:2: experiments: expected a mapping"));
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    repeats:\n    seed: 3\n") ==
        "trainq.yaml:5: experiments.a.repeats: expected a positive integer, got nothing");
}

TEST_CASE("manifest: repeats given as a mapping is checked and located", "[manifest][errors]") {
  // Adaptive repeats ({min, max, until}): the spine refuses them ("not supported
  // yet"); once they are supported an incomplete one is still an error. Either way
  // the message names the file, the line and experiments.a.repeats.
  const char* text = R"(version: 1
experiments:
  a:
    command: x
    repeats:
      min: 3
      max: 10
)";
  auto msg = ErrorOf(text);
  CHECK_THAT(msg, Catch::StartsWith("trainq.yaml:6: experiments.a.repeats"));
  CHECK_THAT(msg, Catch::Contains("not supported yet") || Catch::Contains("until: missing"));
  auto flow = ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                      "    repeats: {min: 3, max: 10, until: 0.01}\n");
  CHECK_THAT(flow, Catch::StartsWith("trainq.yaml:5: experiments.a.repeats"));
  CHECK_THAT(flow, Catch::Contains("not supported yet") || Catch::Contains("until: expected"));
}

TEST_CASE("manifest: other per-key checks", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    max_attempts: 0\n") ==
        "trainq.yaml:5: experiments.a.max_attempts: expected a positive integer, got \"0\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources: {gpus: two}\n") ==
        "trainq.yaml:5: experiments.a.resources.gpus: expected a non-negative integer, got "
        "\"two\"");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources: 1\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.resources: expected a mapping"));
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    watch: {a: b}\n") ==
        "trainq.yaml:5: experiments.a.watch: expected a list of globs, got a mapping");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    watch: [ok, [no]]\n") ==
        "trainq.yaml:5: experiments.a.watch: expected a string, got a list");
}

TEST_CASE("manifest: env_passthrough from defaults or the experiment, into the batch's spec",
          "[manifest]") {
  auto m = ParseManifest(R"(version: 1
defaults:
  env_passthrough: [WANDB_API_KEY, "HF_*"]
experiments:
  a:
    command: x
  b:
    command: y
    env_passthrough: []
  c:
    command: z
    env_passthrough: [WANDB_MODE]
)",
                         "trainq.yaml");
  REQUIRE(m);
  using V = std::vector<std::string>;
  REQUIRE(m->Find("a")->env_passthrough);
  CHECK(*m->Find("a")->env_passthrough == V{"WANDB_API_KEY", "HF_*"});
  CHECK(*m->Find("b")->env_passthrough == V{});  // an empty list: nothing passed
  CHECK(*m->Find("c")->env_passthrough == V{"WANDB_MODE"});
  auto spec = nlohmann::json::parse(m->Find("a")->ToBatchSpec("r").spec_json);
  CHECK(spec.at("env_passthrough") == nlohmann::json::array({"WANDB_API_KEY", "HF_*"}));
  CHECK(nlohmann::json::parse(m->Find("b")->ToBatchSpec("r").spec_json).at("env_passthrough") ==
        nlohmann::json::array());
  // Not written: the operator's set, and nothing in the spec.
  auto plain = ParseManifest("version: 1\nexperiments:\n  a:\n    command: x\n", "trainq.yaml");
  REQUIRE(plain);
  CHECK_FALSE(plain->experiments[0].env_passthrough);
  CHECK_FALSE(nlohmann::json::parse(plain->experiments[0].ToBatchSpec("r").spec_json)
                  .contains("env_passthrough"));
}

TEST_CASE("manifest: env_passthrough mistakes", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    env_passthrough: HOME\n") ==
        "trainq.yaml:5: experiments.a.env_passthrough: expected a list of variable names such as "
        "[WANDB_API_KEY, \"HF_*\"], got \"HOME\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n"
                "    env_passthrough: [OK, \"A B\"]\n") ==
        "trainq.yaml:5: experiments.a.env_passthrough[1]: expected a variable name or PREFIX*, got "
        "\"A B\"");
  CHECK_THAT(ErrorOf("version: 1\ndefaults:\n  env_passthrough: [\"*\"]\nexperiments:\n  a:\n"
                     "    command: x\n"),
             Catch::StartsWith("trainq.yaml:3: defaults.env_passthrough[0]: expected a variable "
                               "name or PREFIX*"));
}

TEST_CASE("manifest: an experiment defined twice", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n  a:\n    command: y\n") ==
        "trainq.yaml:5: experiments.a: duplicate key (first written at line 3; YAML would keep "
        "only one of them)");
}

TEST_CASE("manifest: a key written twice anywhere is refused", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nversion: 1\nexperiments:\n  a:\n    command: x\n") ==
        "trainq.yaml:2: version: duplicate key (first written at line 1; YAML would keep only "
        "one of them)");
  CHECK_THAT(ErrorOf("version: 1\ndefaults:\n  metric: {name: a, name: b}\nexperiments:\n"
                     "  a:\n    command: x\n"),
             Catch::StartsWith("trainq.yaml:3: defaults.metric.name: duplicate key"));
}

TEST_CASE("manifest: placeholders in a command must be known", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: run --out {outdir}\n") ==
        "trainq.yaml:4: experiments.a.command: unknown placeholder {outdir} (known: {seed}, "
        "{repeat}, {run_id}, {output_dir})");
  // The shell's ${VAR} and braces that are not a name are left alone.
  auto m = ParseManifest(
      "version: 1\nexperiments:\n  a:\n    command: echo ${HOME} {seed} {repeat} {run_id} "
      "{output_dir} && awk '{ print $1 }' f\n",
      "trainq.yaml");
  INFO((m ? "" : m.error().message));
  CHECK(m.has_value());
}

TEST_CASE("manifest: watch globs the matcher cannot honour are refused", "[manifest][errors]") {
  struct Row {
    const char* glob;
    const char* why;
  };
  for (const Row& r : {Row{"src/{a,b}.py", "'{' is not supported"},
                       Row{"src/[ab].py", "'[' is not supported"},
                       Row{"src//x.py", "empty path part"},
                       Row{"src/", "empty path part"},
                       Row{"../other/**", "no '.' or '..' parts"},
                       Row{"src/**.py", "`**` must be a whole path part"}}) {
    INFO(r.glob);
    auto msg = ErrorOf(std::string("version: 1\nexperiments:\n  a:\n    command: x\n    watch: ['") +
                       r.glob + "']\n");
    CHECK_THAT(msg, Catch::StartsWith(std::string("trainq.yaml:5: experiments.a.watch: glob '") +
                                      r.glob + "': "));
    CHECK_THAT(msg, Catch::Contains(r.why));
  }
  for (const char* ok : {"src/**", "./train.py", "/data/*.csv", "a/**/b?.py"}) {
    INFO(ok);
    CHECK(ParseManifest(std::string("version: 1\nexperiments:\n  a:\n    command: x\n    watch: ['") +
                            ok + "']\n",
                        "trainq.yaml")
              .has_value());
  }
}

TEST_CASE("manifest: the file name in messages is the one given", "[manifest][errors]") {
  auto m = ParseManifest("version: 3\nexperiments:\n  a:\n    command: x\n", "sub/other.yaml");
  REQUIRE_FALSE(m.has_value());
  CHECK_THAT(m.error().message, Catch::StartsWith("sub/other.yaml:1: version:"));
}


TEST_CASE("manifest: resources.nodes and processes_per_node make a gang", "[manifest][gang]") {
  auto m = ParseManifest("version: 1\n"
                         "defaults:\n"
                         "  resources: {processes_per_node: 2}\n"
                         "experiments:\n"
                         "  ddp:\n"
                         "    command: torchrun-free.sh\n"
                         "    resources: {nodes: 3, processes_per_node: 4, gpus: 1}\n"
                         "  one:\n"
                         "    command: x\n"
                         "  plain:\n"
                         "    command: x\n"
                         "    resources: {gpus: 0}\n",
                         "trainq.yaml");
  REQUIRE(m);
  const auto* ddp = m->Find("ddp");
  REQUIRE(ddp);
  CHECK(ddp->gang);
  CHECK(ddp->nodes == 3);
  CHECK(ddp->processes_per_node == 4);
  auto j = nlohmann::json::parse(ddp->ToBatchSpec("r").spec_json);
  CHECK(j["resources"]["nodes"] == 3);
  CHECK(j["resources"]["processes_per_node"] == 4);
  // From defaults: one machine, two processes.
  const auto* one = m->Find("one");
  REQUIRE(one);
  CHECK(one->gang);
  CHECK(one->nodes == 1);
  CHECK(one->processes_per_node == 2);
  // `resources:` overriding only gpus keeps the defaults' gang keys.
  CHECK(m->Find("plain")->gang);
  auto none = ParseManifest("version: 1\nexperiments:\n  a:\n    command: x\n", "trainq.yaml");
  REQUIRE(none);
  CHECK_FALSE(none->experiments[0].gang);
  auto jn = nlohmann::json::parse(none->experiments[0].ToBatchSpec("r").spec_json);
  CHECK_FALSE(jn["resources"].contains("nodes"));
}

TEST_CASE("manifest: bad gang sizes name the file, line and key", "[manifest][gang][errors]") {
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources: {nodes: 0}\n") ==
        "trainq.yaml:5: experiments.a.resources.nodes: expected a positive integer (machines), "
        "got \"0\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources:\n"
                "      processes_per_node: two\n") ==
        "trainq.yaml:6: experiments.a.resources.processes_per_node: expected a positive integer "
        "(processes on each machine), got \"two\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources: {nodes: 5000}\n") ==
        "trainq.yaml:5: experiments.a.resources.nodes: at most 1024 machines, got \"5000\"");
  CHECK_THAT(ErrorOf("version: 1\nexperiments:\n  a:\n    command: x\n    resources: {node: 2}\n"),
             Catch::StartsWith("trainq.yaml:5: experiments.a.resources.node: unknown key"));
}

TEST_CASE("manifest: correction and determinism are read, and are no input of the runs",
          "[manifest]") {
  auto plain = ParseManifest(R"(version: 1
defaults: {repeats: 3}
experiments:
  a: {command: "true", watch: [a.py]}
)", "trainq.yaml");
  REQUIRE(plain);
  CHECK(plain->experiments[0].correction == "holm");
  CHECK_FALSE(plain->experiments[0].determinism_check);
  auto m = ParseManifest(R"(version: 1
defaults: {repeats: 3, correction: bh, determinism: check}
experiments:
  a: {command: "true", watch: [a.py]}
  b: {command: "true", determinism: "off"}
)", "trainq.yaml");
  REQUIRE(m);
  CHECK(m->experiments[0].correction == "bh");
  CHECK(m->experiments[0].determinism_check);
  CHECK_FALSE(m->experiments[1].determinism_check);
  // Neither key changes what a run does: the same inputs as without them.
  CHECK(m->defaults_definition == plain->defaults_definition);
  CHECK(m->experiments[0].definition == plain->experiments[0].definition);
  auto spec = nlohmann::json::parse(m->experiments[0].ToBatchSpec("r").spec_json);
  CHECK(spec["correction"] == "bh");
  CHECK(spec["determinism"] == "check");
  // The companion batch of a determinism check.
  auto specs = WithDeterminismChecks({m->experiments[0].ToBatchSpec("r"),
                                      m->experiments[1].ToBatchSpec("r")});
  REQUIRE(specs.size() == 3);
  CHECK(specs[2].experiment == "a@repro");
  CHECK(specs[2].repeats == 1);
  CHECK(specs[2].seed_start == specs[0].seed_start);
  CHECK(nlohmann::json::parse(specs[2].spec_json)["baseline"] == "off");
  CHECK(IsReproExperiment("a@repro"));
  CHECK_FALSE(IsReproExperiment("a"));
  CHECK(ReproTargetOf("a@repro") == "a");
}

TEST_CASE("manifest: a wrong correction or determinism names the key", "[manifest][errors]") {
  CHECK(ErrorOf("version: 1\ndefaults: {correction: bonferroni}\nexperiments:\n  a: {command: x}\n") ==
        "trainq.yaml:2: defaults.correction: expected holm, bh or none, got \"bonferroni\"");
  CHECK(ErrorOf("version: 1\nexperiments:\n  a: {command: x, determinism: yes}\n") ==
        "trainq.yaml:3: experiments.a.determinism: expected check or off, got \"yes\"");
  // correction is a family-wide setting: only in defaults.
  CHECK(ErrorOf("version: 1\nexperiments:\n  a: {command: x, correction: bh}\n").find(
            "correction") != std::string::npos);
}

}  // namespace
}  // namespace trainq
