// JudgeRun and MeaningfulTail: how an attempt's end becomes the run's outcome
// and the message users see in `trainq runs`, `trainq show` and the serve log.
#include "agent/runner/run_process.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "tests/agent/agent_test_util.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

ExitStatus Exit(int code) {
  ExitStatus s;
  s.code = code;
  return s;
}

MetricReading Value(double v) {
  MetricReading r;
  r.value = v;
  r.points.push_back({"accuracy", v, std::nullopt, true});
  return r;
}

TEST_CASE("run outcome: each way an attempt ends, and whether it is retried", "[run_outcome]") {
  const std::string banner = "=== trainq: run 2 (exp, seed 1, attempt 1) at 2026-01-01 UTC ===\n";
  struct Row {
    const char* what;
    int code;
    bool timed_out;
    std::string command;
    std::string log;
    MetricReading reading;
    bool succeeded;
    bool config_error;
    std::string error;
  };
  MetricReading none;
  MetricReading other;
  other.points = {{"acc", 0.9, std::nullopt, true}, {"loss", 0.3, 1, false},
                  {"acc", 0.91, std::nullopt, true}};
  const Row rows[] = {
      {"success", 0, false, "python3 t.py", banner + "ok\n", Value(0.9), true, false, ""},
      {"a crash is retried", 1, false, "python3 t.py",
       banner + "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: bad\n",
       none, false, false,
       "exit code 1: Traceback (most recent call last): | File \"t.py\", line 3 | ValueError: bad"},
      {"trainq-train's bad spec is not retried", 2, false, "trainq-train 'configs/a.yaml'",
       banner + "trainq-train: bad spec: configs/a.yaml:4: optimizer.learning_rate: unknown key\n",
       none, false, true,
       "exit code 2 (configuration error, not retried): trainq-train: bad spec: "
       "configs/a.yaml:4: optimizer.learning_rate: unknown key"},
      {"trainq-train's data error is not retried", 3, false, "trainq-train 'a.yaml' --seed 1",
       banner + "trainq-train: data error: x.csv: No such file\n", none, false, true,
       "exit code 3 (configuration error, not retried): trainq-train: data error: x.csv: No such "
       "file"},
      {"exit 2 of another program is retried", 2, false, "./train.sh", banner + "usage\n", none,
       false, false, "exit code 2: usage"},
      {"argparse's usage error is not retried", 2, false, "python3 train.py --lr 0.1",
       banner + "usage: train.py [-h] --lr LR --epochs EPOCHS\n"
                "train.py: error: the following arguments are required: --epochs\n",
       none, false, true,
       "exit code 2 (configuration error, not retried): usage: train.py [-h] --lr LR --epochs "
       "EPOCHS | train.py: error: the following arguments are required: --epochs"},
      {"click's usage error is not retried", 2, false, "python3 train.py --lrr 1",
       banner + "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\n"
                "Error: No such option: --lrr\n",
       none, false, true,
       "exit code 2 (configuration error, not retried): Usage: train.py [OPTIONS] | Try "
       "'train.py --help' for help. | Error: No such option: --lrr"},
      {"'usage:' inside a line is no usage error", 2, false, "./train.sh",
       banner + "GPU memory usage: 80%\n", none, false, false,
       "exit code 2: GPU memory usage: 80%"},
      {"exit 1 after a usage line is retried", 1, false, "python3 train.py",
       banner + "usage: train.py\n", none, false, false, "exit code 1: usage: train.py"},
      {"a command the shell cannot find", 127, false, "pyhton3 t.py",
       banner + "sh: 1: pyhton3: not found\n", none, false, true,
       "exit code 127 (configuration error, not retried): sh: 1: pyhton3: not found"},
      {"python cannot open the script", 2, false, "python3 trian.py",
       banner + "python3: can't open file '/w/trian.py': [Errno 2] No such file or directory\n",
       none, false, true,
       "exit code 2 (configuration error, not retried): python3: can't open file '/w/trian.py': "
       "[Errno 2] No such file or directory"},
      {"a timeout is retried", -1, true, "trainq-train 'a.yaml'", banner + "epoch 3/100\n", none,
       false, false, "timed out after 5s (process group killed): epoch 3/100"},
      {"a metric under another name lists the names written", 0, false, "python3 t.py",
       banner + "done\n", other, false, false,
       "exited 0 but reported no 'accuracy' metric ($TRAINQ_METRICS_FILE holds 'acc', 'loss'; "
       "set metric.name in trainq.yaml to one of them): done"},
      {"no metric at all", 0, false, "python3 t.py", banner, none, false, false,
       "exited 0 but reported no 'accuracy' metric (nothing in $TRAINQ_METRICS_FILE)"},
      {"a NaN metric", 0, false, "python3 t.py", banner, Value(std::nan("")), false, false,
       "metric 'accuracy' is nan; the run is invalid"},
  };
  for (const auto& r : rows) {
    INFO(r.what);
    RunEnd end;
    if (r.code >= 0) end.status = Exit(r.code);
    if (r.timed_out) {
      end.status.code = -1;
      end.status.signal = 9;
    }
    end.timed_out = r.timed_out;
    end.timeout_s = 5;
    end.command = r.command;
    end.metric_name = "accuracy";
    end.log = r.log;
    auto o = JudgeRun(end, r.reading);
    CHECK(o.succeeded == r.succeeded);
    CHECK(o.config_error == r.config_error);
    CHECK(o.error == r.error);
  }
}

TEST_CASE("run outcome: the tail skips banners and blank lines, keeps the last drawing of a "
          "progress bar, and is bounded", "[run_outcome]") {
  CHECK(MeaningfulTail("=== trainq: run 1 ===\n\n  a  \n=== trainq: run 1 again ===\nb\n") ==
        "a | b");
  CHECK(MeaningfulTail("epoch 1 10%\repoch 1 50%\repoch 1 100%\n") == "epoch 1 100%");
  CHECK(MeaningfulTail("x\ry\r\n") == "y");
  CHECK(MeaningfulTail("1\n2\n3\n4\n5\n6\n7\n", 3) == "5 | 6 | 7");
  std::string long_line(1000, 'x');
  auto t = MeaningfulTail(long_line + "\nERROR at the end\n", 5, 100);
  CHECK(t.size() == 103);
  CHECK(t.starts_with("..."));
  CHECK(t.ends_with("ERROR at the end"));
  CHECK(MeaningfulTail("=== trainq: only a banner ===\n").empty());
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE("FindTrainqTrain: beside trainq first, then PATH, only executable files",
          "[run_outcome][trainer]") {
  namespace fs = std::filesystem;
  testing::TempDir tmp;
  fs::path self = tmp / "self", on_path = tmp / "path", other = tmp / "other";
  for (const auto& d : {self, on_path, other}) fs::create_directories(d);
  auto make = [](const fs::path& p, bool executable) {
    testing::Spit(p, "#!/bin/sh\n");
    fs::permissions(p, executable ? fs::perms::owner_all : fs::perms::owner_read);
  };
  const std::string path = other.string() + "::" + on_path.string();
  CHECK(FindTrainqTrain(self.string(), path).empty());
  make(on_path / "trainq-train", true);
  CHECK(FindTrainqTrain(self.string(), path) == (on_path / "trainq-train").string());
  CHECK(FindTrainqTrain("", path) == (on_path / "trainq-train").string());
  make(other / "trainq-train", false);  // not executable: skipped
  CHECK(FindTrainqTrain(self.string(), path) == (on_path / "trainq-train").string());
  make(self / "trainq-train", true);
  CHECK(FindTrainqTrain(self.string(), path) == (self / "trainq-train").string());
  CHECK(FindTrainqTrain(self.string(), "") == (self / "trainq-train").string());
}

}  // namespace
}  // namespace trainq
