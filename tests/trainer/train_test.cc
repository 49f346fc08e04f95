// Training behaviour on small real data (iris, 150 rows): exact seeds, fused
// replicas against single runs, macrobatch streaming, callbacks, failures.
#include "trainer/train.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/strings.h"
#include "tests/support/temp_dir.h"
#include "trainer/cli.h"
#include "trainer/data.h"
#include "trainer/spec.h"

namespace trainq::trainer {
namespace {

const std::string kIris = std::string(TRAINQ_SOURCE_DIR) + "/examples/data/iris.csv";

Spec MakeSpec(const std::string& body, const std::vector<std::string>& sets = {}) {
  testing::TempDir dir;
  const std::string text = "data:\n  path: " + kIris +
                           "\n  split: {train: 0.6, validation: 0.2, test: 0.2, split_seed: 3}\n"
                           "  normalize: standard\n" +
                           body;
  REQUIRE(WriteFile(dir / "spec.yaml", text));
  auto spec = LoadSpec(dir / "spec.yaml", sets);
  if (!spec) FAIL(spec.error().message);
  return *spec;
}

const char* kMlp =
    "model:\n  layers:\n"
    "    - {type: linear, out: 16}\n"
    "    - {type: batchnorm}\n"
    "    - relu\n"
    "    - {type: dropout, p: 0.2}\n"
    "    - {type: linear, out: 3}\n"
    "loss: cross_entropy\n"
    "optimizer: {type: adamw, lr: 0.01, schedule: {type: cosine}}\n"
    "trainer: {epochs: 6, batch_size: 16}\n"
    "metrics: [accuracy, loss, f1]\n";

TrainReport MustTrain(const Spec& spec, TrainConfig config) {
  config.record_details = true;
  auto r = Train(spec, config);
  if (!r) FAIL(r.error().message);
  return *r;
}

TEST_CASE("the same seed gives bit-identical metrics, another seed does not") {
  Spec spec = MakeSpec(kMlp);
  TrainConfig config;
  config.seeds = {7};
  TrainReport a = MustTrain(spec, config);
  TrainReport b = MustTrain(spec, config);
  REQUIRE(a.replicas.size() == 1);
  CHECK(a.replicas[0].train_loss == b.replicas[0].train_loss);
  CHECK(a.replicas[0].validation == b.replicas[0].validation);
  CHECK(a.replicas[0].final_metrics == b.replicas[0].final_metrics);
  CHECK(a.replicas[0].final_split == "test");
  CHECK(a.replicas[0].train_loss.size() == 6);

  config.seeds = {8};
  TrainReport c = MustTrain(spec, config);
  CHECK(c.replicas[0].initial_parameters != a.replicas[0].initial_parameters);
  CHECK(c.replicas[0].train_loss != a.replicas[0].train_loss);
  CHECK(c.rows_seen[0] != a.rows_seen[0]);
}

void CheckClose(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(tol).margin(tol));
}

void CheckFusedMatchesSingle(const Spec& spec) {
  TrainConfig fused;
  fused.seeds = {5, 6, 7};
  TrainReport f = MustTrain(spec, fused);
  REQUIRE(f.fused);
  REQUIRE(f.replicas.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    TrainConfig single;
    single.seeds = {5 + i};
    TrainReport s = MustTrain(spec, single);
    INFO("replica " << i);
    CHECK(f.replicas[i].seed == 5 + i);
    // Same initial weights, exactly.
    CHECK(f.replicas[i].initial_parameters == s.replicas[0].initial_parameters);
    // Same trajectory within float tolerance.
    CheckClose(f.replicas[i].train_loss, s.replicas[0].train_loss, 1e-4);
    CHECK(f.replicas[i].epochs_run == s.replicas[0].epochs_run);
    CHECK(f.replicas[i].steps == s.replicas[0].steps);
    for (const auto& [name, v] : s.replicas[0].final_metrics) {
      CHECK(f.replicas[i].final_metrics.at(name) == Approx(v).margin(1e-4));
    }
  }
}

TEST_CASE("replica i of a fused run reproduces the single run with seed S+i") {
  CheckFusedMatchesSingle(MakeSpec(kMlp));
}

TEST_CASE("fused replicas match single runs with conv2d, maxpool2d, layernorm and sgd nesterov") {
  // Iris's 4 features as a 1x2x2 image.
  CheckFusedMatchesSingle(MakeSpec(
      "model:\n  layers:\n"
      "    - {type: reshape, shape: [1, 2, 2]}\n"
      "    - {type: conv2d, out: 4, kernel: 2, padding: 1}\n"
      "    - {type: batchnorm}\n"
      "    - {type: maxpool2d, kernel: 2, stride: 1}\n"
      "    - flatten\n"
      "    - {type: layernorm}\n"
      "    - gelu\n"
      "    - {type: linear, out: 3}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, schedule: {type: step, step_size: 2}}\n"
      "trainer: {epochs: 4, batch_size: 16}\n"));
}

TEST_CASE("fused replicas match single runs with lstm and gru, and with early stopping") {
  // Iris's 4 features as a sequence of 4 steps of 1 value.
  CheckFusedMatchesSingle(MakeSpec(
      "model:\n  layers:\n"
      "    - {type: reshape, shape: [4, 1]}\n"
      "    - {type: gru, hidden: 6, return: sequence}\n"
      "    - {type: lstm, hidden: 5}\n"
      "    - tanh\n"
      "    - {type: linear, out: 3}\n"
      "optimizer: {type: adam, lr: 0.05}\n"
      "trainer:\n  epochs: 12\n  batch_size: 32\n"
      "  callbacks: [{type: early_stopping, params: {monitor: val_accuracy, patience: 2}}]\n"));
}

TEST_CASE("regression losses (mse, l1) train, report mse and mae, and fuse") {
  // Iris: predict petal width (column 3) from the other three measurements.
  // Its variance is about 0.58; a small MLP gets well under a third of it.
  for (const char* loss : {"mse", "l1"}) {
    INFO("loss " << loss);
    Spec spec = MakeSpec(std::string("  features: \"0:3\"\n  labels: 3\n"
                                     "model: {layers: [{type: linear, out: 16}, tanh, {type: linear, out: 1}]}\n"
                                     "loss: ") +
                         loss +
                         "\noptimizer: {type: adam, lr: 0.02}\n"
                         "trainer: {epochs: 30, batch_size: 16}\n"
                         "metrics: [mse, mae, loss]\n");
    TrainConfig config;
    config.seeds = {1};
    TrainReport r = MustTrain(spec, config);
    const auto& m = r.replicas[0].final_metrics;
    REQUIRE(m.count("mse"));
    REQUIRE(m.count("mae"));
    CHECK(m.at("mse") < 0.2);
    CHECK(m.at("mae") > 0);
    CHECK(m.at("mae") * m.at("mae") <= m.at("mse") + 1e-9);  // Jensen: mean|e|^2 <= mean e^2
    CHECK(m.at("loss") == Approx(std::string(loss) == "mse" ? m.at("mse") : m.at("mae")).epsilon(1e-4));
    CHECK(r.replicas[0].train_loss.back() < r.replicas[0].train_loss.front());
    CheckFusedMatchesSingle(spec);
  }
}

TEST_CASE("embedding over integer ids, with cross_entropy and with bce_with_logits") {
  // Sequences of four ids in 0..9; the class is whether the first id is >= 5.
  testing::TempDir dir;
  std::string csv;
  std::uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((x >> 33) % 10);
  };
  for (int i = 0; i < 400; ++i) {
    int ids[4] = {next(), next(), next(), next()};
    for (int id : ids) csv += std::to_string(id) + ",";
    csv += ids[0] >= 5 ? "1\n" : "0\n";
  }
  REQUIRE(WriteFile(dir / "ids.csv", csv));
  const std::string common =
      "data: {path: ids.csv, split: {train: 300, test: 100}}\n"
      "optimizer: {type: adam, lr: 0.02}\n"
      "trainer: {epochs: 15, batch_size: 32}\n"
      "metrics: [accuracy, f1, loss]\n";
  struct Case {
    const char* loss;
    int out;
  };
  for (Case c : {Case{"cross_entropy", 2}, Case{"bce_with_logits", 1}}) {
    INFO("loss " << c.loss);
    REQUIRE(WriteFile(dir / "spec.yaml",
                      common + "loss: " + c.loss +
                          "\nmodel: {layers: [{type: embedding, vocab: 10, dim: 4}, flatten, "
                          "{type: linear, out: 8}, relu, {type: linear, out: " +
                          std::to_string(c.out) + "}]}\n"));
    auto spec = LoadSpec(dir / "spec.yaml", {});
    if (!spec) FAIL(spec.error().message);
    TrainConfig config;
    config.seeds = {2};
    TrainReport r = MustTrain(*spec, config);
    const auto& m = r.replicas[0].final_metrics;
    CHECK(m.at("accuracy") > 0.9);
    CHECK(m.at("f1") > 0.85);
    CheckFusedMatchesSingle(*spec);
  }
}

TEST_CASE("early stopping restores the best epoch's weights before the final evaluation") {
  // monitor train_loss with mode max: the loss falls, so the first epoch is
  // the best and training stops after `patience` more. No test split: the
  // final metrics are on the validation split, comparable with each epoch's.
  const std::string body =
      "model: {layers: [{type: linear, out: 16}, {type: batchnorm}, relu, {type: linear, out: 3}]}\n"
      "optimizer: {type: adam, lr: 0.01}\n"
      "trainer:\n  epochs: 8\n  batch_size: 16\n"
      "  callbacks: [{type: early_stopping, params: {monitor: train_loss, mode: max, patience: 2}}]\n";
  const std::string split = "data.split={train: 0.7, validation: 0.3, split_seed: 3}";
  auto check = [](const ReplicaReport& rep, bool restore) {
    INFO("seed " << rep.seed << " restore " << restore);
    REQUIRE(rep.stopped_early);
    REQUIRE(rep.final_split == "validation");
    std::int64_t best_epoch = 0;
    double best = -INFINITY;
    for (std::size_t e = 0; e < rep.train_loss.size(); ++e) {
      if (rep.train_loss[e] > best) {
        best = rep.train_loss[e];
        best_epoch = static_cast<std::int64_t>(e) + 1;
      }
    }
    REQUIRE(best_epoch < rep.epochs_run);  // the last epoch is not the best one
    const double best_val = rep.validation[static_cast<std::size_t>(best_epoch - 1)].at("val_loss");
    const double last_val = rep.validation.back().at("val_loss");
    REQUIRE(best_val != Approx(last_val).margin(1e-6));
    if (restore) {
      CHECK(rep.restored_epoch == best_epoch);
      CHECK(rep.final_metrics.at("loss") == Approx(best_val).margin(1e-6));
      CHECK(rep.final_metrics.at("accuracy") ==
            Approx(rep.validation[static_cast<std::size_t>(best_epoch - 1)].at("val_accuracy")).margin(1e-9));
    } else {
      CHECK(rep.restored_epoch == 0);
      CHECK(rep.final_metrics.at("loss") == Approx(last_val).margin(1e-6));
    }
  };
  for (bool restore : {true, false}) {
    std::vector<std::string> sets{split};
    if (!restore) sets.push_back("trainer.callbacks.early_stopping.restore_best=false");
    Spec spec = MakeSpec(body, sets);
    REQUIRE(spec.trainer.early_stopping->restore_best == restore);
    TrainConfig single;
    single.seeds = {2};
    check(MustTrain(spec, single).replicas.at(0), restore);
    TrainConfig fused;  // each replica restores its own best weights
    fused.seeds = {2, 3};
    TrainReport f = MustTrain(spec, fused);
    REQUIRE(f.fused);
    for (const auto& rep : f.replicas) check(rep, restore);
    if (restore) CHECK_THAT(f.notices.at(0), Catch::Contains("restored the weights of epoch"));
  }
}

TEST_CASE("streamed macrobatches show every training row once per epoch, two in memory at most") {
  testing::TempDir dir;
  // Iris as raw float32 rows on disk: 4 features then the class.
  DataSpec csv;
  csv.path = kIris;
  csv.format = "csv";
  auto source = OpenRowSource(csv, {});
  REQUIRE(source.has_value());
  std::vector<std::int64_t> all;
  for (std::int64_t i = 0; i < (*source)->rows(); ++i) all.push_back(i);
  auto block = ReadRows(**source, all, Normalizer{});
  REQUIRE(block.has_value());
  std::vector<float> values;
  for (std::int64_t r = 0; r < block->rows; ++r) {
    for (int c = 0; c < 4; ++c) values.push_back(block->x[static_cast<std::size_t>(r * 4 + c)]);
    values.push_back(block->y[static_cast<std::size_t>(r)]);
  }
  REQUIRE(WriteF32(dir / "iris.f32", values));
  REQUIRE(WriteFile(dir / "spec.yaml",
                    "data: {path: iris.f32, columns: 5, split: {train: 100, test: 50}, normalize: standard}\n"
                    "model: {layers: [{type: linear, out: 8}, relu, {type: dropout, p: 0.1}, {type: linear, out: 3}]}\n"
                    "optimizer: {type: adam, lr: 0.05}\n"
                    "trainer: {epochs: 3, batch_size: 8, macro_batch_size: 24}\n"));
  auto spec = LoadSpec(dir / "spec.yaml", {});
  REQUIRE(spec.has_value());
  TrainConfig config;
  config.seeds = {3};
  TrainReport r = MustTrain(*spec, config);
  CHECK(r.streamed);
  // At most two in memory; whether the reader is one ahead at a given moment
  // depends on the scheduler (it was not, once, on a loaded machine).
  CHECK(r.max_macrobatches_alive >= 1);
  CHECK(r.max_macrobatches_alive <= 2);
  auto split = SplitDataset(150, spec->data.split);
  REQUIRE(split.has_value());
  std::multiset<std::int64_t> expected(split->train.begin(), split->train.end());
  REQUIRE(r.rows_seen.size() == 3);
  for (const auto& epoch : r.rows_seen) {
    CHECK(std::multiset<std::int64_t>(epoch.begin(), epoch.end()) == expected);
  }
  CHECK(r.rows_seen[0] != r.rows_seen[1]);  // shuffled across epochs
  CHECK(r.replicas[0].final_metrics.at("accuracy") > 0.6);

  // Streaming, fused: replica i still reproduces the single run.
  CheckFusedMatchesSingle(*spec);
}

TEST_CASE("streamed CSV and gzip CSV show every training row once per epoch") {
  testing::TempDir dir;
  // Iris (150 rows) as CSV with the row ordinal as an extra first column.
  DataSpec iris;
  iris.path = kIris;
  iris.format = "csv";
  auto source = OpenRowSource(iris, {});
  REQUIRE(source.has_value());
  std::vector<std::int64_t> all;
  for (std::int64_t i = 0; i < (*source)->rows(); ++i) all.push_back(i);
  auto block = ReadRows(**source, all, Normalizer{});
  REQUIRE(block.has_value());
  std::string text = "row,a,b,c,d,class\n";
  for (std::int64_t r = 0; r < block->rows; ++r) {
    text += std::to_string(r);
    for (int c = 0; c < 4; ++c) text += "," + FormatDouble(block->x[static_cast<std::size_t>(r * 4 + c)], 2);
    text += "," + FormatDouble(block->y[static_cast<std::size_t>(r)], 0) + "\n";
  }
  REQUIRE(WriteFile(dir / "iris.csv", text));
  REQUIRE(testing::RunShell("gzip -k " + ShellQuote(dir / "iris.csv")) == 0);
  for (const std::string name : {"iris.csv", "iris.csv.gz"}) {
    SECTION(name) {
      // 100 training rows in macrobatches of 32: 32, 32, 32 and 4.
      REQUIRE(WriteFile(dir / "spec.yaml",
                        "data: {path: " + name + ", features: '1:5', split: {train: 100, test: 50}, "
                        "normalize: standard}\n"
                        "model: {layers: [{type: linear, out: 8}, relu, {type: linear, out: 3}]}\n"
                        "optimizer: {type: adam, lr: 0.05}\n"
                        "trainer: {epochs: 3, batch_size: 8, macro_batch_size: 32}\n"));
      auto spec = LoadSpec(dir / "spec.yaml", {});
      REQUIRE(spec.has_value());
      TrainConfig config;
      config.seeds = {3};
      TrainReport r = MustTrain(*spec, config);
      CHECK(r.streamed);
      CHECK(r.max_macrobatches_alive >= 1);
      CHECK(r.max_macrobatches_alive <= 2);
      auto split = SplitDataset(150, spec->data.split);
      REQUIRE(split.has_value());
      std::multiset<std::int64_t> expected(split->train.begin(), split->train.end());
      REQUIRE(r.rows_seen.size() == 3);
      for (const auto& epoch : r.rows_seen) {
        CHECK(std::multiset<std::int64_t>(epoch.begin(), epoch.end()) == expected);
      }
      CHECK(r.rows_seen[0] != r.rows_seen[1]);
      CHECK(r.replicas[0].final_metrics.at("accuracy") > 0.6);
    }
  }
}

TEST_CASE("fused repeats on two threads (--threads 2) give the metrics of one thread") {
  // Streamed too: each replica group reads its own macrobatches.
  for (const std::string trainer : {"", "trainer.macro_batch_size=40"}) {
    INFO(trainer);
    std::vector<std::string> sets;
    if (!trainer.empty()) sets.push_back(trainer);
    Spec spec = MakeSpec(kMlp, sets);
    TrainConfig one;
    one.seeds = {11, 12, 13, 14, 15};
    TrainConfig two = one;
    two.threads = 2;
    TrainReport a = MustTrain(spec, one);
    TrainReport b = MustTrain(spec, two);
    CHECK(a.streamed == !trainer.empty());
    REQUIRE(a.fused);
    REQUIRE(b.fused);
    REQUIRE(a.replicas.size() == 5);
    REQUIRE(b.replicas.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) {
      INFO("replica " << i);
      CHECK(b.replicas[i].seed == a.replicas[i].seed);
      CHECK(b.replicas[i].initial_parameters == a.replicas[i].initial_parameters);
      CheckClose(b.replicas[i].train_loss, a.replicas[i].train_loss, 1e-6);
      REQUIRE(b.replicas[i].validation.size() == a.replicas[i].validation.size());
      for (std::size_t e = 0; e < a.replicas[i].validation.size(); ++e) {
        for (const auto& [name, v] : a.replicas[i].validation[e]) {
          CHECK(b.replicas[i].validation[e].at(name) == Approx(v).margin(1e-6));
        }
      }
      REQUIRE(b.replicas[i].final_metrics.size() == a.replicas[i].final_metrics.size());
      for (const auto& [name, v] : a.replicas[i].final_metrics) {
        CHECK(b.replicas[i].final_metrics.at(name) == Approx(v).margin(1e-6));
      }
      CHECK(b.replicas[i].steps == a.replicas[i].steps);
    }
  }
}

const char* kDense =
    "model:\n  layers:\n"
    "    - {type: linear, out: 16}\n"
    "    - relu\n"
    "    - {type: linear, out: 8, bias: false}\n"
    "    - {type: linear, out: 8}\n"
    "    - relu\n"
    "    - {type: linear, out: 3}\n"
    "loss: cross_entropy\n"
    "trainer: {epochs: 8, batch_size: 16}\n"
    "metrics: [accuracy, loss, f1]\n";

TEST_CASE("linear/relu stacks take the CPU fast path: it follows the libtorch path and single runs") {
  const std::vector<std::vector<std::string>> variants = {
      {"optimizer={type: adam, lr: 0.01, weight_decay: 0.001}"},
      {"optimizer={type: adamw, lr: 0.01, schedule: {type: cosine}}"},
      {"optimizer={type: sgd, lr: 0.05, momentum: 0.9, nesterov: true}"},
      {"optimizer={type: adam, lr: 0.05}", "trainer.macro_batch_size=40",
       "trainer.callbacks=[{type: early_stopping, params: {monitor: val_loss, patience: 1}}]"},
  };
  for (const auto& sets : variants) {
    std::string label;
    for (const auto& set : sets) label += set + " ";
    INFO(label);
    Spec spec = MakeSpec(kDense, sets);
    TrainConfig fast;
    fast.seeds = {3, 4, 5};
    TrainReport f = MustTrain(spec, fast);
    CHECK(f.fast_path);
    // Same spec and seeds: bit-identical.
    TrainReport again = MustTrain(spec, fast);
    TrainConfig slow = fast;
    slow.fast_path = false;
    TrainReport t = MustTrain(spec, slow);
    CHECK_FALSE(t.fast_path);
    REQUIRE(f.replicas.size() == 3);
    REQUIRE(t.replicas.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("replica " << i);
      CHECK(again.replicas[i].train_loss == f.replicas[i].train_loss);
      CHECK(again.replicas[i].final_metrics == f.replicas[i].final_metrics);
      CHECK(f.replicas[i].initial_parameters == t.replicas[i].initial_parameters);
      CheckClose(f.replicas[i].train_loss, t.replicas[i].train_loss, 1e-4);
      CHECK(f.replicas[i].epochs_run == t.replicas[i].epochs_run);
      CHECK(f.replicas[i].steps == t.replicas[i].steps);
      for (const auto& [name, v] : t.replicas[i].final_metrics) {
        CHECK(f.replicas[i].final_metrics.at(name) == Approx(v).margin(1e-4));
      }
    }
    CheckFusedMatchesSingle(spec);
  }
  // Anything else in the stack keeps the libtorch path.
  TrainConfig config;
  config.seeds = {3};
  CHECK_FALSE(MustTrain(MakeSpec(kMlp), config).fast_path);
}

TEST_CASE("a NaN loss stops the run with exit code 1 and names the seed") {
  Spec spec = MakeSpec(
      "model: {layers: [{type: linear, out: 3}]}\n"
      "optimizer: {type: sgd, lr: 1.0e38}\n"
      "trainer: {epochs: 3, batch_size: 16}\n");
  TrainConfig config;
  config.seeds = {4};
  auto r = Train(spec, config);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().exit_code == kExitTrainingFailed);
  CHECK_THAT(r.error().message, Catch::Contains("seed 4") && (Catch::Contains("NaN") || Catch::Contains("infinite")));
}

TEST_CASE("a model whose outputs do not fit the labels is a spec error naming the layer") {
  Spec spec = MakeSpec("model: {layers: [{type: linear, out: 2}]}\n");
  auto r = Train(spec, TrainConfig{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().exit_code == kExitBadSpec);
  CHECK_THAT(r.error().message, Catch::Contains("model.layers[0]") && Catch::Contains("labels go up to 2"));
}

TEST_CASE("checkpointing keeps the best epoch and writes metrics lines per seed") {
  testing::TempDir dir;
  Spec spec = MakeSpec(std::string(kMlp) +
                       "  \n", {"trainer.callbacks=[{type: checkpointing, params: {every: 3, monitor: val_accuracy}}]"});
  TrainConfig config;
  config.seeds = {1, 2};
  config.output_dir = dir / "out";
  config.metrics_file = dir / "metrics.jsonl";
  TrainReport r = MustTrain(spec, config);
  for (const char* seed : {"seed-1", "seed-2"}) {
    INFO(seed);
    CHECK(std::filesystem::exists(dir.path() / "out" / seed / "checkpoints" / "best.pt"));
    CHECK(std::filesystem::exists(dir.path() / "out" / seed / "checkpoints" / "best.json"));
    CHECK(std::filesystem::exists(dir.path() / "out" / seed / "checkpoints" / "epoch-3.pt"));
    CHECK(std::filesystem::exists(dir.path() / "out" / seed / "checkpoints" / "epoch-6.pt"));
  }
  auto text = ReadFile(dir / "metrics.jsonl");
  REQUIRE(text.has_value());
  int finals = 0;
  for (const std::string& line : trainq::Split(*text, '\n')) {
    if (line.find("\"final\":true") != std::string::npos) ++finals;
  }
  CHECK(finals == 6);  // accuracy, loss, f1 for two seeds
  CHECK_THAT(*text, Catch::Contains("\"seed\":2"));
}

// Iris streamed from its CSV: 90 training rows in macrobatches of 30, batches
// of 16 (16 + 14 per macrobatch): 3 macrobatches and 6 steps an epoch.
void CheckBatchAndMacrobatchCallbacks(const std::string& model) {
  testing::TempDir dir;
  Spec spec = MakeSpec(model + "optimizer: {type: adam, lr: 0.01}\n"
                               "trainer:\n  epochs: 6\n  batch_size: 16\n  macro_batch_size: 30\n"
                               "  callbacks:\n"
                               "    - {type: loss_logging, params: {every_batches: 4}}\n"
                               "    - {type: checkpointing, params: {every_batches: 12, every_macrobatches: 5}}\n"
                               "metrics: [accuracy, loss]\n");
  TrainConfig config;
  config.seeds = {4, 5};
  config.output_dir = dir / "out";
  config.metrics_file = dir / "metrics.jsonl";
  TrainReport fused = MustTrain(spec, config);
  CHECK(fused.streamed);
  REQUIRE(fused.replicas.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const ReplicaReport& rep = fused.replicas[i];
    INFO("seed " << rep.seed);
    CHECK(rep.steps == 36);
    // Per batch: a line every 4 steps.
    REQUIRE(rep.batch_losses.size() == 9);
    for (std::size_t j = 0; j < rep.batch_losses.size(); ++j) {
      CHECK(rep.batch_losses[j].first == 4 * static_cast<std::int64_t>(j + 1));
      CHECK(std::isfinite(rep.batch_losses[j].second));
    }
    // Per macrobatch: three an epoch, and their mean is the epoch's train loss
    // (equal-sized macrobatches).
    REQUIRE(rep.macrobatch_losses.size() == 18);
    REQUIRE(rep.train_loss.size() == 6);
    for (std::size_t e = 0; e < 6; ++e) {
      const double mean =
          (rep.macrobatch_losses[3 * e] + rep.macrobatch_losses[3 * e + 1] + rep.macrobatch_losses[3 * e + 2]) / 3;
      CHECK(mean == Approx(rep.train_loss[e]).epsilon(1e-9));
    }
    CHECK(rep.macrobatch_losses.front() > rep.macrobatch_losses.back());  // it learns
    const auto ck = dir.path() / "out" / ("seed-" + std::to_string(rep.seed)) / "checkpoints";
    for (const char* name : {"step-12.pt", "step-24.pt", "step-36.pt",
                             // macrobatches 5, 10 and 15 of the run
                             "epoch-2-macro-2.pt", "epoch-4-macro-1.pt", "epoch-5-macro-3.pt"}) {
      CHECK(std::filesystem::exists(ck / name));
    }
    CHECK_FALSE(std::filesystem::exists(ck / "step-6.pt"));
    CHECK_FALSE(std::filesystem::exists(ck / "epoch-1-macro-1.pt"));
  }
  auto text = ReadFile(dir / "metrics.jsonl");
  REQUIRE(text.has_value());
  int batch_lines = 0, macro_lines = 0;
  for (const std::string& line : trainq::Split(*text, '\n')) {
    if (line.find("\"batch_loss\"") != std::string::npos) ++batch_lines;
    if (line.find("\"macrobatch_loss\"") != std::string::npos) ++macro_lines;
  }
  CHECK(batch_lines == 18);
  CHECK(macro_lines == 36);

  // Fused replica i logs what the single run with its seed logs.
  for (std::size_t i = 0; i < 2; ++i) {
    TrainConfig single;
    single.seeds = {fused.replicas[i].seed};
    single.output_dir = dir / ("single-" + std::to_string(i));
    TrainReport one = MustTrain(spec, single);
    const ReplicaReport& a = one.replicas[0];
    const ReplicaReport& b = fused.replicas[i];
    REQUIRE(a.batch_losses.size() == b.batch_losses.size());
    for (std::size_t j = 0; j < a.batch_losses.size(); ++j) {
      CHECK(a.batch_losses[j].first == b.batch_losses[j].first);
      CHECK(a.batch_losses[j].second == Approx(b.batch_losses[j].second).margin(1e-4));
    }
    REQUIRE(a.macrobatch_losses.size() == b.macrobatch_losses.size());
    for (std::size_t j = 0; j < a.macrobatch_losses.size(); ++j) {
      CHECK(a.macrobatch_losses[j] == Approx(b.macrobatch_losses[j]).margin(1e-4));
    }
  }
}

TEST_CASE("callbacks fire per batch and per macrobatch, fused as single") {
  SECTION("libtorch path (batchnorm, dropout)") {
    CheckBatchAndMacrobatchCallbacks(
        "model:\n  layers:\n    - {type: linear, out: 16}\n    - {type: batchnorm}\n    - relu\n"
        "    - {type: dropout, p: 0.2}\n    - {type: linear, out: 3}\n"
        "loss: cross_entropy\n");
  }
  SECTION("CPU fast path (linear and relu only)") {
    CheckBatchAndMacrobatchCallbacks(
        "model:\n  layers:\n    - {type: linear, out: 16}\n    - relu\n    - {type: linear, out: 3}\n"
        "loss: cross_entropy\n");
  }
}

}  // namespace
}  // namespace trainq::trainer
