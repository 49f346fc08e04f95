#include "trainer/spec.h"

#include <catch2/catch.hpp>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

const char* kValid =
    "data:\n"
    "  path: data/x.csv\n"
    "  split: {train: 0.7, validation: 0.1, split_seed: 4}\n"
    "model:\n"
    "  layers:\n"
    "    - {type: linear, out: 32}\n"
    "    - relu\n"
    "    - {type: linear, out: 3}\n"
    "optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, schedule: {type: step, step_size: 3}}\n"
    "trainer:\n"
    "  epochs: 4\n"
    "  batch_size: 8\n"
    "  callbacks: [{type: early_stopping, params: {monitor: val_accuracy, patience: 2}}]\n"
    "metrics: [accuracy, f1]\n";

Result<Spec> Load(const std::string& text, const std::vector<std::string>& sets = {}) {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "spec.yaml", text));
  return LoadSpec(dir / "spec.yaml", sets);
}

std::string ErrorOf(const std::string& text, const std::vector<std::string>& sets = {}) {
  auto spec = Load(text, sets);
  REQUIRE_FALSE(spec.has_value());
  CHECK(spec.error().kind == ErrorKind::kInvalidArgument);
  return spec.error().message;
}

TEST_CASE("ParseSpec reads every section") {
  auto spec = Load(kValid);
  REQUIRE(spec.has_value());
  CHECK(spec->data.path.ends_with("/data/x.csv"));
  CHECK(spec->data.format == "csv");
  CHECK(spec->data.split.train == 0.7);
  CHECK(spec->data.split.split_seed == 4);
  REQUIRE(spec->model.layers.size() == 3);
  CHECK(spec->model.layers[1].type == "relu");
  CHECK(spec->model.layers[2].out == 3);
  CHECK(spec->optimizer.type == "sgd");
  CHECK(spec->optimizer.nesterov);
  CHECK(spec->optimizer.schedule.type == "step");
  CHECK(spec->trainer.epochs == 4);
  REQUIRE(spec->trainer.early_stopping.has_value());
  CHECK(spec->trainer.early_stopping->mode == "max");
  CHECK(spec->trainer.early_stopping->patience == 2);
  CHECK(spec->metrics == std::vector<std::string>{"accuracy", "f1"});
}

TEST_CASE("relative data paths are taken from the folder of the file that names them") {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "base");
  std::filesystem::create_directories(dir.path() / "exp");
  REQUIRE(WriteFile(dir / "base/common.yaml", std::string(kValid)));
  REQUIRE(WriteFile(dir / "exp/child.yaml", "template: ../base/common.yaml\ntrainer: {epochs: 9}\n"));
  auto spec = LoadSpec(dir / "exp/child.yaml", {});
  REQUIRE(spec.has_value());
  CHECK(spec->data.path == (dir.path() / "base/data/x.csv").lexically_normal().string());
  CHECK(spec->trainer.epochs == 9);
  CHECK(spec->trainer.batch_size == 8);
  // A --set path is taken from the current directory.
  auto set = LoadSpec(dir / "exp/child.yaml", {"data.path=other.csv"});
  REQUIRE(set.has_value());
  CHECK(set->data.path == "other.csv");
}

TEST_CASE("spec errors name the file, the line and the key") {
  std::string text = kValid;
  auto bad = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    auto pos = t.find(from);
    REQUIRE(pos != std::string::npos);
    return ErrorOf(t.replace(pos, from.size(), to));
  };
  CHECK_THAT(bad("epochs: 4", "epochs: four"),
             Catch::Contains("spec.yaml:11: trainer.epochs: expected an integer, got 'four'"));
  CHECK_THAT(bad("epochs: 4", "epochs: 0"), Catch::Contains("spec.yaml:11: trainer.epochs: must be at least 1"));
  CHECK_THAT(bad("batch_size: 8", "batch_sise: 8"),
             Catch::Contains("spec.yaml:12: trainer.batch_sise: unknown key"));
  CHECK_THAT(bad("{type: linear, out: 3}", "{type: linaer, out: 3}"),
             Catch::Contains("spec.yaml:8: model.layers[2].type: expected one of"));
  CHECK_THAT(bad("{type: linear, out: 32}", "{type: linear}"),
             Catch::Contains("spec.yaml:6: model.layers[0]: a linear layer needs 'out'"));
  CHECK_THAT(bad("type: sgd", "type: rmsprop"), Catch::Contains("spec.yaml:9: optimizer.type"));
  CHECK_THAT(bad("metrics: [accuracy, f1]", "metrics: [accuracy, mse]"),
             Catch::Contains("metrics: mse needs a regression loss"));
  CHECK_THAT(bad("monitor: val_accuracy", "monitor: val_recall"),
             Catch::Contains("'val_recall' is not a computed metric"));
  CHECK_THAT(bad("validation: 0.1, ", ""), Catch::Contains("needs a validation split"));
  CHECK_THAT(bad("  path: data/x.csv\n", ""), Catch::Contains("data.path: a data file is required"));
}

TEST_CASE("an error from a --set override names the override") {
  CHECK_THAT(ErrorOf(kValid, {"trainer.epochs=-3"}),
             Catch::Contains("--set trainer.epochs: trainer.epochs: must be at least 1"));
}

TEST_CASE("an error in a template names the template file") {
  testing::TempDir dir;
  std::string base = kValid;
  base.replace(base.find("lr: 0.1"), 7, "lr: fast");
  REQUIRE(WriteFile(dir / "base.yaml", base));
  REQUIRE(WriteFile(dir / "child.yaml", "template: base.yaml\ntrainer: {epochs: 2}\n"));
  auto spec = LoadSpec(dir / "child.yaml", {});
  REQUIRE_FALSE(spec.has_value());
  CHECK_THAT(spec.error().message, Catch::Contains("base.yaml:9: optimizer.lr"));
}

TEST_CASE("layers accept the whole vocabulary") {
  auto spec = Load(
      "data: {path: x.f32, columns: 11}\n"
      "model:\n  layers:\n"
      "    - {type: embedding, vocab: 20, dim: 4}\n"
      "    - {type: lstm, hidden: 8, return: sequence}\n"
      "    - {type: gru, hidden: 8}\n"
      "    - {type: layernorm, eps: 1.0e-6}\n"
      "    - {type: reshape, shape: [2, 2, -1]}\n"
      "    - {type: conv2d, out: 3, kernel: 1}\n"
      "    - {type: maxpool2d, kernel: 2}\n"
      "    - {type: batchnorm, momentum: 0.2}\n"
      "    - flatten\n    - tanh\n    - gelu\n    - sigmoid\n"
      "    - {type: dropout, p: 0.3}\n"
      "    - {type: linear, out: 1, bias: false}\n"
      "loss: bce_with_logits\n"
      "optimizer: {type: adamw, betas: [0.8, 0.99], schedule: {type: cosine, min_lr: 0.0001, warmup_epochs: 1}}\n");
  REQUIRE(spec.has_value());
  CHECK(spec->data.format == "f32");
  CHECK(spec->model.layers.size() == 14);
  CHECK(spec->model.layers[1].sequence);
  CHECK(spec->model.layers[4].shape == std::vector<std::int64_t>{2, 2, -1});
  CHECK(spec->optimizer.weight_decay == 0.01);  // adamw's default
  CHECK(spec->optimizer.beta1 == 0.8);
  CHECK_FALSE(spec->model.layers[13].bias);
}

TEST_CASE("the f32 format needs the row width") {
  CHECK_THAT(ErrorOf("data: {path: x.f32}\nmodel: {layers: [relu]}\n"), Catch::Contains("data.columns"));
}

TEST_CASE("the distributed section is read, and its errors name the file, the line and the key") {
  const std::string base = std::string(kValid).substr(0, std::string(kValid).find("  callbacks:")) +
                           "metrics: [accuracy, f1]\n";
  auto spec = Load(base + "distributed:\n  workers: 4\n  nodes: 2\n  mode: asynchronous\n  every_n_epochs: 3\n"
                          "  shuffle: both\n  rendezvous: tcp://10.0.0.1:29500\n  timeout: 2m\n");
  if (!spec) FAIL(spec.error().message);
  REQUIRE(spec->distributed.has_value());
  const DistributedSpec& d = *spec->distributed;
  CHECK(d.workers == 4);
  CHECK(d.nodes == 2);
  CHECK(d.mode == "asynchronous");
  CHECK(d.every_n_epochs == 3);
  CHECK(d.shuffle == "both");
  CHECK(d.rendezvous == "tcp://10.0.0.1:29500");
  CHECK(d.timeout_seconds == 120);
  CHECK_FALSE(d.GradientSync());

  auto defaults = Load(base + "distributed: {workers: 2}\n");
  REQUIRE(defaults);
  CHECK(defaults->distributed->GradientSync());
  CHECK(defaults->distributed->rendezvous == "auto");
  CHECK(defaults->distributed->timeout_seconds == 300);
  CHECK_FALSE(Load(base)->distributed.has_value());

  // Line 15 is the first key of the section.
  auto bad = [&](const std::string& section) { return ErrorOf(base + "distributed:\n" + section); };
  CHECK_THAT(bad("  workers: two\n"), Catch::Contains("spec.yaml:15: distributed.workers: expected an integer"));
  CHECK_THAT(bad("  workers: 0\n"), Catch::Contains("spec.yaml:15: distributed.workers: must be at least 1"));
  CHECK_THAT(bad("  worker: 2\n"), Catch::Contains("spec.yaml:15: distributed.worker: unknown key"));
  CHECK_THAT(bad("  workers: 2\n  mode: eventually\n"),
             Catch::Contains("spec.yaml:16: distributed.mode: expected one of: synchronous, partially_asynchronous, "
                             "asynchronous, got 'eventually'"));
  CHECK_THAT(bad("  workers: 2\n  shuffle: blocks\n"),
             Catch::Contains("spec.yaml:16: distributed.shuffle: gradient all-reduce"));
  CHECK_THAT(bad("  workers: 3\n  nodes: 2\n"),
             Catch::Contains("spec.yaml:16: distributed.nodes: workers (3) must be a multiple of nodes (2)"));
  CHECK_THAT(bad("  workers: 4\n  nodes: 2\n"),
             Catch::Contains("spec.yaml:16: distributed.rendezvous: auto starts the workers on this machine only"));
  CHECK_THAT(bad("  workers: 2\n  rendezvous: udp://x:1\n"),
             Catch::Contains("spec.yaml:16: distributed.rendezvous: expected auto, env or tcp://HOST:PORT"));
  CHECK_THAT(bad("  workers: 2\n  rendezvous: tcp://host:99999\n"),
             Catch::Contains("spec.yaml:16: distributed.rendezvous"));
  CHECK_THAT(bad("  workers: 2\n  timeout: soon\n"),
             Catch::Contains("spec.yaml:16: distributed.timeout: expected a positive duration"));
  CHECK_THAT(bad("  workers: 2\n  mode: partially_asynchronous\n  every_n_epochs: 2\n"),
             Catch::Contains("spec.yaml:17: distributed.every_n_epochs: partially_asynchronous merges after every"));
  CHECK_THAT(ErrorOf(std::string(kValid) + "distributed: {workers: 2, mode: asynchronous}\n"),
             Catch::Contains("trainer.callbacks.early_stopping: needs distributed.mode synchronous"));
  CHECK(Load(std::string(kValid) + "distributed: {workers: 2, every_n_epochs: 1}\n").has_value());
}

}  // namespace
}  // namespace trainq::trainer
