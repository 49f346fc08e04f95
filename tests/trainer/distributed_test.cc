// Data-parallel training with the real trainq-train binary and real ranks
// (rendezvous auto: rank 0 starts rank 1 on this machine), on the digits
// MLP of bench/digits_mlp_bench.yaml: bit-identity with one worker, gradient
// all-reduce against one process, bytes per epoch by mode, and faults.
#include <signal.h>
#include <sys/types.h>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include "core/process.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

const std::string kBinary = TRAINQ_TRAIN_BINARY;
const std::string kSource = TRAINQ_SOURCE_DIR;
// The digits MLP: 64-256-128-10 with biases.
constexpr double kParams = 64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;  // 50,826
constexpr double kWeightBytes = 4 * kParams;                                   // 203,304
constexpr int kStepsPerEpoch = (1437 + 63) / 64;                               // 23
// gloo's framing and the notifications of one call, at most (measured: 576 B).
constexpr double kPerCallSlack = 1024;

// The bench spec (1437 training rows, 360 test rows) with `extra` over it.
std::string WriteSpec(const testing::TempDir& dir, int epochs, const std::string& extra) {
  const std::string path = dir / "spec.yaml";
  REQUIRE(WriteFile(path, "template: " + kSource + "/bench/digits_mlp_bench.yaml\n" +
                              "trainer: {epochs: " + std::to_string(epochs) + ", batch_size: 64}\n" + extra));
  return path;
}

struct Metrics {
  std::string text;
  std::map<std::string, std::map<std::int64_t, double>> by_epoch;  // name -> epoch -> value (not final)
  std::map<std::string, double> finals;
};

Metrics ReadMetrics(const std::string& path) {
  Metrics m;
  auto text = ReadFile(path);
  REQUIRE(text.has_value());
  m.text = *text;
  for (const std::string& line : Split(*text, '\n')) {
    if (Trim(line).empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.value("final", false)) {
      m.finals[j["name"]] = j["value"];
    } else {
      m.by_epoch[j["name"]][j["epoch"].get<std::int64_t>()] = j["value"];
    }
  }
  return m;
}

Metrics Train(const testing::TempDir& dir, const std::string& spec, const std::string& name, int seed = 1) {
  const std::string metrics = dir / (name + ".jsonl");
  std::string out;
  const int rc = testing::RunShell(ShellQuote(kBinary) + " " + ShellQuote(spec) + " -q --seed " +
                                       std::to_string(seed) + " --metrics-file " + ShellQuote(metrics) + " 2>&1",
                                   &out);
  INFO(name << ": " << out);
  REQUIRE(rc == 0);
  return ReadMetrics(metrics);
}

TEST_CASE("distributed: one worker gives bit-identical metrics to no distributed section") {
  testing::TempDir dir;
  Metrics plain = Train(dir, WriteSpec(dir, 3, ""), "plain");
  for (const std::string mode : {"synchronous", "asynchronous"}) {
    Metrics one = Train(dir, WriteSpec(dir, 3, "distributed: {workers: 1, mode: " + mode + "}\n"), mode);
    CHECK(one.text == plain.text);
  }
  CHECK(plain.by_epoch.count("dist_bytes_sent") == 0);
}

TEST_CASE("distributed: gradient all-reduce over 2 ranks follows one process with the same global batch") {
  testing::TempDir dir;
  Metrics one = Train(dir, WriteSpec(dir, 6, ""), "one");
  Metrics two = Train(dir, WriteSpec(dir, 6, "distributed: {workers: 2}\n"), "two");
  REQUIRE(one.by_epoch["train_loss"].size() == 6);
  REQUIRE(two.by_epoch["train_loss"].size() == 6);
  for (const auto& [epoch, loss] : one.by_epoch["train_loss"]) {
    const double other = two.by_epoch["train_loss"][epoch];
    INFO("epoch " << epoch << ": one process " << loss << ", two ranks " << other);
    CHECK(std::abs(other - loss) <= 1e-4 * std::abs(loss));
  }
  REQUIRE(one.finals.count("accuracy"));
  CHECK(two.finals["accuracy"] == one.finals["accuracy"]);
  CHECK(two.by_epoch["dist_comm_seconds"].size() == 6);
}

TEST_CASE("distributed: bytes sent per epoch agree with the formula for each mode (W=2)") {
  testing::TempDir dir;
  // W=2: a ring all-reduce sends 2(W-1)/W = 1 times its buffer.
  auto within = [](double measured, double payload, int calls) {
    INFO("measured " << measured << ", payload " << payload << ", calls " << calls);
    CHECK(measured >= payload);
    CHECK(measured <= payload + kPerCallSlack * calls);
  };
  SECTION("synchronous gradients: every step the gradients, every epoch the loss sums") {
    Metrics m = Train(dir, WriteSpec(dir, 2, "distributed: {workers: 2}\n"), "grad");
    REQUIRE(m.by_epoch["dist_bytes_sent"].size() == 2);
    for (const auto& [epoch, bytes] : m.by_epoch["dist_bytes_sent"]) {
      within(bytes, kStepsPerEpoch * kWeightBytes + 16, kStepsPerEpoch + 1);
    }
  }
  SECTION("synchronous every 2 epochs: the weights and the loss sums at epochs 2 and 4, nothing between") {
    Metrics m = Train(dir, WriteSpec(dir, 4, "distributed: {workers: 2, every_n_epochs: 2}\n"), "avg2");
    REQUIRE(m.by_epoch["dist_bytes_sent"].size() == 4);
    CHECK(m.by_epoch["dist_bytes_sent"][1] == 0);
    CHECK(m.by_epoch["dist_bytes_sent"][3] == 0);
    within(m.by_epoch["dist_bytes_sent"][2], kWeightBytes + 16, 2);
    within(m.by_epoch["dist_bytes_sent"][4], kWeightBytes + 16, 2);
    within(m.by_epoch["dist_bytes_sent_total"][4], 2 * (kWeightBytes + 16), 4);
  }
  SECTION("asynchronous, only at the end: nothing during the epochs") {
    Metrics m = Train(dir, WriteSpec(dir, 3, "distributed: {workers: 2, mode: asynchronous}\n"), "async");
    REQUIRE(m.by_epoch["dist_bytes_sent"].size() == 3);
    for (const auto& [epoch, bytes] : m.by_epoch["dist_bytes_sent"]) CHECK(bytes == 0);
    within(m.by_epoch["dist_bytes_sent_total"][3], kWeightBytes, 1);  // the mean at the end
  }
  SECTION("partially asynchronous: rank 0 sends the general model back once per rank and epoch") {
    // The merge server answers whenever rank 1 arrives (it starts later, so it
    // may arrive after rank 0's last epoch line): per epoch 0 or more replies,
    // in all one per epoch plus the final mean.
    const int epochs = 3;
    Metrics m =
        Train(dir, WriteSpec(dir, epochs, "distributed: {workers: 2, mode: partially_asynchronous}\n"), "partial");
    REQUIRE(m.by_epoch["dist_bytes_sent"].size() == epochs);
    for (const auto& [epoch, bytes] : m.by_epoch["dist_bytes_sent"]) {
      const double replies = std::round(bytes / kWeightBytes);
      within(bytes, replies * kWeightBytes, static_cast<int>(replies));
    }
    within(m.by_epoch["dist_bytes_sent_total"][epochs], (epochs + 1) * kWeightBytes, epochs + 1);
  }
  SECTION("asynchronous every 2 epochs: merges after epochs 2 and 4, then the final mean") {
    Metrics m =
        Train(dir, WriteSpec(dir, 4, "distributed: {workers: 2, mode: asynchronous, every_n_epochs: 2}\n"), "a2");
    within(m.by_epoch["dist_bytes_sent_total"][4], 3 * kWeightBytes, 3);
  }
}

// A W=2 gradient run long enough to be killed mid-epoch: its pids and log.
struct RunningPair {
  PosixProcessRunner runner;
  int rank0 = 0, rank1 = 0;
  std::string log, metrics;
};

void StartPair(const testing::TempDir& dir, RunningPair& p, const std::string& timeout) {
  const std::string spec = WriteSpec(dir, 2000, "distributed: {workers: 2, timeout: " + timeout + "}\n");
  p.log = dir / "log.txt";
  p.metrics = dir / "m.jsonl";
  ProcessSpec ps;
  ps.argv = {kBinary, spec, "-q", "--metrics-file", p.metrics};
  ps.output_path = p.log;
  auto pid = p.runner.Spawn(ps);
  REQUIRE(pid);
  p.rank0 = *pid;
  // Mid-epoch: rank 1 is up and rank 0 has written an epoch's metrics.
  const std::regex started("rank 1 started \\(pid ([0-9]+)\\)");
  REQUIRE(testing::WaitFor([&] {
    auto log = ReadFile(p.log);
    std::smatch match;
    if (!log || !std::regex_search(*log, match, started)) return false;
    p.rank1 = std::stoi(match[1]);
    auto m = ReadFile(p.metrics);
    return m && m->find("\"train_loss\"") != std::string::npos;
  }, std::chrono::seconds(60)));
}

// Gone: no such process, or one that has ended and waits to be reaped by init.
bool Gone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  auto status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  return !status || status->find("State:\tZ") != std::string::npos;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_CASE("distributed: kill -9 of a rank mid-epoch stops every rank within 5 s with a clear error") {
  SECTION("rank 1 killed: rank 0 names it, exits 4 and leaves no process") {
    testing::TempDir dir;
    RunningPair p;
    StartPair(dir, p, "60s");
    REQUIRE(::kill(p.rank1, SIGKILL) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<ExitStatus> status;
    REQUIRE(testing::WaitFor([&] { return (status = p.runner.Poll(p.rank0)).has_value(); }, std::chrono::seconds(5)));
    INFO(ReadFile(p.log).value_or(""));
    CHECK(SecondsSince(t0) < 5);
    CHECK(status->code == 4);
    // Whichever sees it first: the watchdog (the rank ended) or the all-reduce (connection reset).
    const std::string log = ReadFile(p.log).value_or("");
    CHECK((log.find("rank 1 (pid " + std::to_string(p.rank1) + ") ended: killed by signal 9") != std::string::npos ||
           log.find("distributed: rank 0: all-reduce failed") != std::string::npos));
    CHECK(Gone(p.rank1));
  }
  SECTION("rank 0 killed: rank 1 sees it and exits") {
    testing::TempDir dir;
    RunningPair p;
    StartPair(dir, p, "60s");
    REQUIRE(::kill(p.rank0, SIGKILL) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    p.runner.Wait(p.rank0);
    REQUIRE(testing::WaitFor([&] { return Gone(p.rank1); }, std::chrono::seconds(5)));
    CHECK(SecondsSince(t0) < 5);
    INFO(ReadFile(p.log).value_or(""));
    CHECK_THAT(ReadFile(p.log).value_or(""), Catch::Contains("trainq-train: rank 1: "));
  }
}

TEST_CASE("distributed: SIGSTOP of a rank stops the others within the collective timeout + 5 s") {
  testing::TempDir dir;
  RunningPair p;
  StartPair(dir, p, "3s");
  REQUIRE(::kill(p.rank1, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<ExitStatus> status;
  REQUIRE(testing::WaitFor([&] { return (status = p.runner.Poll(p.rank0)).has_value(); }, std::chrono::seconds(8)));
  const std::string log = ReadFile(p.log).value_or("");
  INFO(log);
  CHECK(SecondsSince(t0) < 3 + 5);
  CHECK(status->code == 4);
  CHECK_THAT(log, Catch::Contains("alive but silent"));
  CHECK(Gone(p.rank1));  // rank 0 killed the stopped rank on its way out
}

}  // namespace
}  // namespace trainq::trainer
