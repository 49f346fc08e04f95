// Runs the real trainq-train binary: the example digits spec, the run
// environment, exit codes and their messages.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

const std::string kBinary = TRAINQ_TRAIN_BINARY;
const std::string kSource = TRAINQ_SOURCE_DIR;
const std::string kTrainq = TRAINQ_BINARY;

struct Finals {
  std::map<std::uint64_t, double> accuracy;  // seed -> final test accuracy
};

Finals ReadFinals(const std::string& path) {
  Finals f;
  auto text = ReadFile(path);
  REQUIRE(text.has_value());
  for (const std::string& line : trainq::Split(*text, '\n')) {
    if (Trim(line).empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.value("final", false) && j["name"] == "accuracy") f.accuracy[j["seed"].get<std::uint64_t>()] = j["value"];
  }
  return f;
}

TEST_CASE("the digits MLP over 5 fused seeds reaches a mean test accuracy of at least 0.90") {
  testing::TempDir dir;
  std::string out;
  // The reference setup: the first 1437 rows train, the last 360 test.
  const int rc = testing::RunShell(
      "cd " + ShellQuote(kSource) + " && TRAINQ_SEED=1 TRAINQ_METRICS_FILE=" + ShellQuote(dir / "m.jsonl") + " " +
          ShellQuote(kBinary) +
          " examples/configs/digits_mlp.yaml --repeats 5 --set trainer.epochs=10"
          " --set 'data.split={train: 1437, test: 360, shuffle: false}' 2>&1",
      &out);
  INFO(out);
  REQUIRE(rc == 0);
  Finals f = ReadFinals(dir / "m.jsonl");
  REQUIRE(f.accuracy.size() == 5);
  double mean = 0;
  for (auto& [seed, acc] : f.accuracy) mean += acc / 5;
  CHECK(f.accuracy.begin()->first == 1);
  CHECK(f.accuracy.rbegin()->first == 5);
  CHECK(mean >= 0.90);
  CHECK_THAT(out, Catch::Contains("5 seeds fused"));
}

TEST_CASE("a trainq.yaml experiment with trainer: runs through the queue, its seeds fused on a worker") {
  // A repository with the iris example; trainq serve boots one local worker
  // that leases the four seeds at once and trains them in one trainq-train.
  testing::TempDir dir;
  const std::string repo = dir / "repo";
  std::filesystem::create_directories(repo + "/configs");
  std::filesystem::create_directories(repo + "/data");
  std::filesystem::copy_file(kSource + "/examples/configs/iris_mlp.yaml", repo + "/configs/iris_mlp.yaml");
  std::filesystem::copy_file(kSource + "/examples/data/iris.csv", repo + "/data/iris.csv");
  REQUIRE(WriteFile(repo + "/trainq.yaml",
                    "version: 1\n"
                    "defaults: {repeats: 4, metric: {name: accuracy, goal: max}, timeout: 5m}\n"
                    "experiments:\n"
                    "  iris:\n"
                    "    trainer: configs/iris_mlp.yaml\n"));
  std::string out;
  REQUIRE(testing::RunShell("cd " + ShellQuote(repo) +
                                " && git init -q && git add -A && git -c user.name=t -c user.email=t@t "
                                "commit -qm iris 2>&1",
                            &out) == 0);
  const std::string trainq = ShellQuote(kTrainq) + " --db " + ShellQuote(dir / "trainq.db");
  REQUIRE(testing::RunShell(trainq + " submit --repo " + ShellQuote(repo) + " 2>&1", &out) == 0);
  // --until-idle: serve returns once the four runs are done and the worker is stopped.
  const int rc = testing::RunShell("cd " + ShellQuote(dir.path().string()) + " && timeout 300 " + trainq +
                                       " serve --machines 1 --slots 1 --fuse-max 4 --until-idle 2>&1",
                                   &out);
  INFO(out);
  REQUIRE(rc == 0);
  REQUIRE(testing::RunShell(trainq + " runs --json", &out) == 0);
  auto runs = nlohmann::json::parse(out);
  REQUIRE(runs.size() == 4);
  std::set<std::int64_t> seeds;
  for (const auto& r : runs) {
    INFO(r.dump());
    CHECK(r["state"] == "succeeded");
    REQUIRE(r["metric"].is_number());
    CHECK(r["metric"].get<double>() > 0.8);
    seeds.insert(r["seed"].get<std::int64_t>());
    auto log = ReadFile(r["log"].get<std::string>());
    REQUIRE(log.has_value());
    CHECK_THAT(*log, Catch::Contains("trainq-train: 4 seeds fused on cpu"));
  }
  CHECK(seeds == std::set<std::int64_t>{1, 2, 3, 4});
  REQUIRE(testing::RunShell(trainq + " machines --all --json", &out) == 0);
  auto machines = nlohmann::json::parse(out)["machines"];
  REQUIRE(machines.size() == 1);
  CHECK(machines[0]["state"] == "stopped");
}

TEST_CASE("exit codes: 2 for a bad spec, 3 for bad data, each naming the place") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "bad.yaml",
                    "data: {path: d.csv}\nmodel:\n  layers:\n    - {type: linear, out: many}\n"));
  std::string out;
  CHECK(testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(dir / "bad.yaml") + " 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("bad.yaml:4: model.layers[0].out: expected an integer, got 'many'"));

  REQUIRE(WriteFile(dir / "d.csv", "1,2,0\n3,4,1\n5,oops,1\n"));
  REQUIRE(WriteFile(dir / "ok.yaml", "data: {path: d.csv}\nmodel: {layers: [{type: linear, out: 2}]}\n"));
  CHECK(testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(dir / "ok.yaml") + " 2>&1", &out) == 3);
  CHECK_THAT(out, Catch::Contains("d.csv: row 3, column 2: 'oops' is not a number"));

  CHECK(testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(dir / "ok.yaml") + " --set trainer.epochs=x 2>&1",
                          &out) == 2);
  CHECK_THAT(out, Catch::Contains("--set trainer.epochs: trainer.epochs: expected an integer"));
}

TEST_CASE("streamed CSV: a malformed row and a truncated gzip file exit 3 naming file and row") {
  testing::TempDir dir;
  std::string text;
  for (int r = 0; r < 3000; ++r) text += std::to_string(r % 17) + "," + std::to_string(r * 7 % 101) + "," +
                                         std::to_string(r % 2) + "\n";
  std::string bad = text;
  bad.insert(bad.rfind('\n', bad.size() - 2), ",9");  // row 2999 gets 4 columns
  REQUIRE(WriteFile(dir / "x.csv", bad));
  REQUIRE(testing::RunShell("gzip " + ShellQuote(dir / "x.csv")) == 0);
  REQUIRE(WriteFile(dir / "t.csv", text));
  REQUIRE(testing::RunShell("gzip " + ShellQuote(dir / "t.csv") + " && head -c 2000 " +
                            ShellQuote(dir / "t.csv.gz") + " > " + ShellQuote(dir / "cut.csv.gz")) == 0);
  const std::string rest = "model: {layers: [{type: linear, out: 2}]}\ntrainer: {epochs: 1, macro_batch_size: 100}\n";
  REQUIRE(WriteFile(dir / "bad.yaml", "data: {path: x.csv.gz}\n" + rest));
  REQUIRE(WriteFile(dir / "cut.yaml", "data: {path: cut.csv.gz}\n" + rest));
  std::string out;
  CHECK(testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(dir / "bad.yaml") + " 2>&1", &out) == 3);
  CHECK_THAT(out, Catch::Contains("x.csv.gz: row 2999: expected 3 columns, found 4"));
  CHECK(testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(dir / "cut.yaml") + " 2>&1", &out) == 3);
  CHECK_THAT(out, Catch::Contains("cut.csv.gz: row ") &&
                      Catch::Contains(": the gzip data ends early (the file is truncated)"));
}

TEST_CASE("print-spec shows the template merged with the overrides") {
  std::string out;
  const int rc = testing::RunShell("cd " + ShellQuote(kSource) + " && " + ShellQuote(kBinary) +
                                       " examples/configs/digits_mlp_small.yaml --print-spec --set trainer.epochs=7",
                                   &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("epochs: 7"));
  CHECK_THAT(out, Catch::Contains("out: 64"));          // the override's layers
  CHECK_THAT(out, Catch::Contains("digits.csv.gz"));    // from the template
  CHECK_THAT(out, Catch::Contains("early_stopping"));   // the override's callback
}

}  // namespace
}  // namespace trainq::trainer
