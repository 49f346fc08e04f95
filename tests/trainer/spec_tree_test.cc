#include "trainer/spec_tree.h"

#include <catch2/catch.hpp>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

SpecNode Parse(const std::string& text, const std::string& file = "t.yaml") {
  auto n = ParseSpecText(text, file);
  REQUIRE(n.has_value());
  return *n;
}

TEST_CASE("ParseSpecText records file and line of every node") {
  SpecNode n = Parse("a: 1\nb:\n  c: x\n  d: [1, 2]\n");
  REQUIRE(n.IsMap());
  CHECK(n.Find("a")->scalar == "1");
  CHECK(n.Find("a")->line == 1);
  CHECK(n.Find("b")->Find("c")->line == 3);
  CHECK(n.Find("b")->Find("d")->items.size() == 2);
  CHECK(n.Find("b")->Find("c")->Where() == "t.yaml:3");
}

TEST_CASE("ParseSpecText reports invalid YAML with its line") {
  auto n = ParseSpecText("a: 1\nb: [1, 2\n", "bad.yaml");
  REQUIRE_FALSE(n.has_value());
  CHECK_THAT(n.error().message, Catch::Contains("bad.yaml:"));
  CHECK_THAT(n.error().message, Catch::Contains("invalid YAML"));
}

TEST_CASE("MergeOver replaces given keys and keeps the rest of the template") {
  SpecNode base = Parse("optimizer: {type: adam, lr: 0.001}\ntrainer: {epochs: 10, batch_size: 32}\n", "base.yaml");
  SpecNode over = Parse("optimizer: {lr: 0.01}\ntrainer: {epochs: 3}\nmetrics: [f1]\n", "over.yaml");
  MergeOver(base, over);
  CHECK(base.Find("optimizer")->Find("type")->scalar == "adam");
  CHECK(base.Find("optimizer")->Find("lr")->scalar == "0.01");
  CHECK(base.Find("optimizer")->Find("lr")->file == "over.yaml");
  CHECK(base.Find("optimizer")->Find("type")->file == "base.yaml");
  CHECK(base.Find("trainer")->Find("batch_size")->scalar == "32");
  CHECK(base.Find("metrics")->items.size() == 1);
}

TEST_CASE("MergeOver matches typed list entries by type and merges their params") {
  SpecNode base = Parse(
      "callbacks:\n"
      "  - {type: checkpointing, params: {every: 5, monitor: val_accuracy}}\n"
      "  - {type: early_stopping, params: {patience: 5}}\n");
  SpecNode over = Parse(
      "callbacks:\n"
      "  - {type: early_stopping, params: {patience: 2, min_delta: 0.01}}\n");
  MergeOver(base, over);
  const SpecNode& cbs = *base.Find("callbacks");
  REQUIRE(cbs.items.size() == 2);
  CHECK(cbs.items[0].Find("params")->Find("every")->scalar == "5");
  const SpecNode& es = *cbs.items[1].Find("params");
  CHECK(es.Find("patience")->scalar == "2");
  CHECK(es.Find("min_delta")->scalar == "0.01");
}

TEST_CASE("MergeOver appends a typed entry of a new type") {
  SpecNode base = Parse("cb: [{type: checkpointing, params: {every: 1}}]\n");
  SpecNode over = Parse("cb: [{type: early_stopping}]\n");
  MergeOver(base, over);
  REQUIRE(base.Find("cb")->items.size() == 2);
  CHECK(base.Find("cb")->items[1].Find("type")->scalar == "early_stopping");
}

TEST_CASE("MergeOver replaces a list of layers whole") {
  SpecNode base = Parse("layers: [{type: linear, out: 64}, relu, {type: linear, out: 10}]\n");
  SpecNode over = Parse("layers: [{type: linear, out: 10}]\n");
  MergeOver(base, over);
  REQUIRE(base.Find("layers")->items.size() == 1);
  CHECK(base.Find("layers")->items[0].Find("out")->scalar == "10");
}

TEST_CASE("LoadSpecTree follows templates relative to the spec's folder") {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "base");
  REQUIRE(WriteFile(dir / "base/common.yaml", "trainer: {epochs: 10, batch_size: 32}\nloss: mse\n"));
  REQUIRE(WriteFile(dir / "child.yaml", "template: base/common.yaml\ntrainer: {epochs: 2}\n"));
  auto tree = LoadSpecTree(dir / "child.yaml");
  REQUIRE(tree.has_value());
  CHECK(tree->Find("template") == nullptr);
  CHECK(tree->Find("trainer")->Find("epochs")->scalar == "2");
  CHECK(tree->Find("trainer")->Find("batch_size")->scalar == "32");
  CHECK(tree->Find("loss")->scalar == "mse");
}

TEST_CASE("LoadSpecTree refuses a template cycle and a missing template") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "a.yaml", "template: b.yaml\n"));
  REQUIRE(WriteFile(dir / "b.yaml", "template: a.yaml\n"));
  auto cyc = LoadSpecTree(dir / "a.yaml");
  REQUIRE_FALSE(cyc.has_value());
  CHECK_THAT(cyc.error().message, Catch::Contains("cycle"));

  REQUIRE(WriteFile(dir / "c.yaml", "template: nope.yaml\n"));
  auto missing = LoadSpecTree(dir / "c.yaml");
  REQUIRE_FALSE(missing.has_value());
  CHECK_THAT(missing.error().message, Catch::Contains("c.yaml:1"));
  CHECK_THAT(missing.error().message, Catch::Contains("nope.yaml"));
}

TEST_CASE("ApplyOverride sets nested keys, list indices and typed entries") {
  SpecNode root = Parse(
      "trainer:\n  epochs: 10\n  callbacks: [{type: early_stopping, params: {patience: 5}}]\n"
      "model:\n  layers: [{type: linear, out: 64}, relu]\n");
  REQUIRE(ApplyOverride(root, "trainer.epochs=3"));
  REQUIRE(ApplyOverride(root, "optimizer.lr=0.5"));
  REQUIRE(ApplyOverride(root, "model.layers.0.out=128"));
  REQUIRE(ApplyOverride(root, "trainer.callbacks.early_stopping.patience=2"));
  CHECK(root.Find("trainer")->Find("epochs")->scalar == "3");
  CHECK(root.Find("trainer")->Find("epochs")->file == "--set trainer.epochs");
  CHECK(root.Find("optimizer")->Find("lr")->scalar == "0.5");
  CHECK(root.Find("model")->Find("layers")->items[0].Find("out")->scalar == "128");
  CHECK(root.Find("trainer")->Find("callbacks")->items[0].Find("params")->Find("patience")->scalar == "2");
}

TEST_CASE("ApplyOverride rejects malformed assignments and bad paths") {
  SpecNode root = Parse("trainer: {epochs: 10}\nmodel: {layers: [relu]}\n");
  CHECK_FALSE(ApplyOverride(root, "trainer.epochs").has_value());
  CHECK_FALSE(ApplyOverride(root, "trainer.epochs.x=1").has_value());
  auto out_of_range = ApplyOverride(root, "model.layers.4.out=1");
  REQUIRE_FALSE(out_of_range.has_value());
  CHECK_THAT(out_of_range.error().message, Catch::Contains("index out of range"));
}

}  // namespace
}  // namespace trainq::trainer
