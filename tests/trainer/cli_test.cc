#include "trainer/cli.h"

#include <catch2/catch.hpp>

#include <map>

#include "trainer/metrics_writer.h"
#include "trainer/progress.h"
#include "trainer/system.h"

namespace trainq::trainer {
namespace {

Result<std::optional<Options>> Parse(std::vector<const char*> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), "trainq-train");
  return ParseCommandLine(static_cast<int>(args.size()), args.data(), [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST_CASE("defaults come from the run environment, flags win") {
  auto o = Parse({"spec.yaml"}, {{"TRAINQ_SEED", "42"}, {"TRAINQ_METRICS_FILE", "/m"}, {"TRAINQ_OUTPUT_DIR", "/o"}});
  REQUIRE(o.has_value());
  REQUIRE(o->has_value());
  CHECK((*o)->seed == 42);
  CHECK((*o)->metrics_file == "/m");
  CHECK((*o)->output_dir == "/o");
  CHECK((*o)->repeats == 1);
  auto f = Parse({"spec.yaml", "--seed", "3", "--repeats", "4", "--set", "a=1", "--set", "b.c=2", "--threads", "2"},
                 {{"TRAINQ_SEED", "42"}});
  REQUIRE(f.has_value());
  CHECK((*f)->seed == 3);
  CHECK((*f)->repeats == 4);
  CHECK((*f)->threads == 2);
  CHECK((*f)->sets == std::vector<std::string>{"a=1", "b.c=2"});
}

TEST_CASE("bad usage is an error") {
  CHECK_FALSE(Parse({}).has_value());
  CHECK_FALSE(Parse({"s.yaml", "--device", "tpu"}).has_value());
  CHECK_FALSE(Parse({"s.yaml", "--repeats", "0"}).has_value());
  auto env = Parse({"s.yaml"}, {{"TRAINQ_SEED", "x1"}});
  REQUIRE_FALSE(env.has_value());
  CHECK_THAT(env.error().message, Catch::Contains("TRAINQ_SEED"));
}

TEST_CASE("metric lines are JSON with the final tag only on final lines") {
  CHECK(FormatMetricLine({"accuracy", 0.5, 200, 3, 7, "test", true}) ==
        R"({"name":"accuracy","value":0.5,"step":200,"epoch":3,"seed":7,"split":"test","final":true})");
  CHECK(FormatMetricLine({"train_loss", 1.25, 10, 1, 2, "train", false}) ==
        R"({"name":"train_loss","value":1.25,"step":10,"epoch":1,"seed":2,"split":"train"})");
  CHECK(ReplicaPath("runs/{seed}/r{repeat}.jsonl", 11, 2) == "runs/11/r2.jsonl");
}

TEST_CASE("the reference BLAS is recognised from the process maps") {
  const std::string reference = "7f00 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0\n";
  const std::string openblas = "7f00 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3\n";
  CHECK(ReferenceBlasWarning(reference).has_value());
  CHECK_FALSE(ReferenceBlasWarning(openblas).has_value());
  CHECK_FALSE(ReferenceBlasWarning("").has_value());
}

TEST_CASE("progress prints one line per epoch off a terminal, a bar with ETA on one") {
  double now = 0;
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  {
    Progress p(out, false, [&] { return now; }, 2, 10);
    p.Batch(1, 5);
    now = 1.5;
    p.EpochEnd(1, "train_loss 0.5000");
  }
  std::fflush(out);
  CHECK(std::string(buf, len) == "epoch 1/2  train_loss 0.5000  (1.50s)\n");
  std::fclose(out);
  free(buf);

  out = open_memstream(&buf, &len);
  now = 0;
  {
    Progress p(out, true, [&] { return now; }, 2, 10);
    now = 2;
    p.Batch(1, 5);  // a quarter done in 2 s: 6 s to go
  }
  std::fflush(out);
  CHECK_THAT(std::string(buf, len), Catch::Contains("25%") && Catch::Contains("ETA 6s"));
  std::fclose(out);
  free(buf);
}

}  // namespace
}  // namespace trainq::trainer
