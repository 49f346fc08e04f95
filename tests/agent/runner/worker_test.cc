// trainq worker's parts: the parsers and planners as tables, the token file,
// and the result outbox on a real disk. The worker against a real Server is
// tests/agent/e2e/worker_e2e_test.cc.
#include "agent/runner/worker.h"

#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/git_fixture.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

// ---- parsers and planners ---------------------------------------------------

TEST_CASE("ParseNvidiaSmi reads nvidia-smi's csv,noheader,nounits output", "[worker]") {
  // As printed by nvidia-smi 535 on a 2 x H100 machine (and a MIG-style N/A).
  const char* text =
      "0, NVIDIA H100 80GB HBM3, 81559\n"
      "1, NVIDIA H100 80GB HBM3, 81559\n"
      "2, NVIDIA A100-SXM4-40GB, [N/A]\n";
  auto gpus = ParseNvidiaSmi(text);
  REQUIRE(gpus);
  REQUIRE(gpus->size() == 3);
  CHECK((*gpus)[0].index == 0);
  CHECK((*gpus)[0].name == "NVIDIA H100 80GB HBM3");
  CHECK((*gpus)[0].memory_mb == 81559);
  CHECK((*gpus)[1].index == 1);
  CHECK((*gpus)[2].name == "NVIDIA A100-SXM4-40GB");
  CHECK((*gpus)[2].memory_mb == 0);

  CHECK(ParseNvidiaSmi("")->empty());
  auto bad = ParseNvidiaSmi("0, NVIDIA H100, 81559\nNo devices were found\n");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("line 2") != std::string::npos);
}

TEST_CASE("ResolveGpus: none, a list of indices, and bad input named", "[worker]") {
  CHECK(ResolveGpus("none")->empty());
  CHECK(ResolveGpus("")->empty());
  auto two = ResolveGpus("0,3");
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK((*two)[1].index == 3);
  auto bad = ResolveGpus("0,x");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("--gpus") != std::string::npos);
}

TEST_CASE("ParseMemTotalMb reads /proc/meminfo", "[worker]") {
  CHECK(ParseMemTotalMb("MemTotal:       131891284 kB\nMemFree:         1000 kB\n") == 128800);
  CHECK(ParseMemTotalMb("MemFree: 1 kB\n") == 0);
  CHECK(DetectMemoryMb() > 0);
}

WorkerRun R(std::int64_t id, std::int64_t seed, std::int64_t group,
            std::string trainer = "t.yaml") {
  WorkerRun r;
  r.lease.run_id = id;
  r.lease.seed = seed;
  r.group = group;
  r.trainer = std::move(trainer);
  return r;
}

std::vector<std::vector<std::int64_t>> Ids(const std::vector<std::vector<WorkerRun>>& job) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& s : job) {
    out.emplace_back();
    for (const auto& r : s) out.back().push_back(r.lease.run_id);
  }
  return out;
}

TEST_CASE("PlanJobs: a fused group of consecutive seeds is one process", "[worker]") {
  auto jobs = PlanJobs({R(1, 5, 0, ""), R(2, 1, 7), R(3, 2, 7), R(4, 3, 7), R(9, 1, 0, "")});
  REQUIRE(jobs.size() == 3);
  CHECK(Ids(jobs[0]) == std::vector<std::vector<std::int64_t>>{{1}});
  CHECK(Ids(jobs[1]) == std::vector<std::vector<std::int64_t>>{{2, 3, 4}});
  CHECK(Ids(jobs[2]) == std::vector<std::vector<std::int64_t>>{{9}});
}

TEST_CASE("PlanJobs: seeds with a gap run as consecutive stretches, one after the other",
          "[worker]") {
  auto jobs = PlanJobs({R(4, 6, 3), R(1, 1, 3), R(2, 2, 3), R(3, 4, 3)});
  REQUIRE(jobs.size() == 1);
  CHECK(Ids(jobs[0]) == std::vector<std::vector<std::int64_t>>{{1, 2}, {3}, {4}});
  // A group without a trainer spec is not fused.
  auto plain = PlanJobs({R(1, 1, 3, ""), R(2, 2, 3, "")});
  CHECK(plain.size() == 2);
}

TEST_CASE("FusedTrainerCommand names per-seed metrics and output paths", "[worker]") {
  CHECK(FusedTrainerCommand("configs/a b.yaml", 3, 4, "/d/groups/7-1") ==
        "trainq-train 'configs/a b.yaml' --seed 3 --repeats 4 --metrics-file "
        "'/d/groups/7-1/{seed}/metrics.jsonl' --output-dir '/d/groups/7-1/{seed}/output'");
}

TEST_CASE("GpuPool packs 1-GPU runs runs_per_gpu to a GPU, multi-GPU runs take whole GPUs",
          "[worker]") {
  GpuPool pool({GpuInfo{0, "", 0}, GpuInfo{1, "", 0}}, 2);
  CHECK(pool.FreeGpus() == 2.0);
  auto a = pool.Take(1);
  REQUIRE(a);
  auto b = pool.Take(1);
  REQUIRE(b);
  CHECK(*a == *b);  // packed on the same GPU
  CHECK(pool.FreeGpus() == 1.0);
  CHECK(!pool.Take(2));  // only one whole GPU is free
  auto c = pool.Take(1);
  REQUIRE(c);
  CHECK(*c != *a);
  CHECK(pool.FreeGpus() == 0.5);
  pool.Give(*a, 1);
  pool.Give(*b, 1);
  auto both = pool.Take(2);
  CHECK(!both);  // GPU c is half used
  pool.Give(*c, 1);
  both = pool.Take(2);
  REQUIRE(both);
  CHECK(both->size() == 2);
  CHECK(pool.Take(0)->empty());
  CHECK(pool.FreeGpus() == 0.0);
}

TEST_CASE("ReadTokenFile trims, and names the file when it is missing or empty", "[worker]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "token", "s3cret-token\n\n"));
  ::chmod((tmp / "token").c_str(), 0600);
  auto t = ReadTokenFile(tmp / "token");
  REQUIRE(t);
  CHECK(*t == "s3cret-token");
  auto missing = ReadTokenFile(tmp / "nope");
  REQUIRE(!missing);
  CHECK(missing.error().message.find(tmp / "nope") != std::string::npos);
  REQUIRE(WriteFile(tmp / "empty", " \n"));
  auto empty = ReadTokenFile(tmp / "empty");
  REQUIRE(!empty);
  CHECK(empty.error().message.find("empty") != std::string::npos);
  // Loose permissions only warn.
  ::chmod((tmp / "token").c_str(), 0644);
  CHECK(ReadTokenFile(tmp / "token"));
}

TEST_CASE("ResultOutbox holds a result it cannot write in memory, says why, and writes it "
          "once the disk takes it",
          "[worker][outbox][disk]") {
  testing::TempDir tmp;
  ResultOutbox box(tmp / "outbox");
  PendingResult r;
  r.run_id = 12;
  r.complete = {{"token", 5}, {"outcome", "succeeded"}, {"metric_value", 0.12}};
  r.log = std::string(20'000, 'o');  // the output the server missed
  PendingResult gang;
  gang.run_id = 12;
  gang.node_rank = 1;
  gang.complete = {{"action", "complete"}, {"token", 5}, {"node_rank", 1}, {"outcome",
                                                                          "succeeded"}};
  {
    // A write past the limit fails as a full disk does (EFBIG here, ENOSPC there).
    testing::FileSizeLimit limit(4096);
    auto st = box.Put(r);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Catch::Contains("outbox/12.json"));
    CHECK_THAT(st.error().message, Catch::Contains("File too large"));
    // Not on disk, not even an empty file: held in memory, and still listed.
    CHECK_FALSE(fs::exists(tmp / "outbox/12.json"));
    CHECK(box.held() == 1);
    CHECK_FALSE(box.empty());
    REQUIRE(box.Put(gang));  // a small one fits: on disk
    auto all = box.All();
    REQUIRE(all.size() == 2);
    CHECK(all[0].node_rank == -1);
    CHECK(all[0].log.size() == 20'000);
    CHECK(all[1].node_rank == 1);
    CHECK_FALSE(box.Persist());  // the disk still refuses
    CHECK(box.held() == 1);
  }
  // Space again: written whole, and readable by a worker restarted later.
  REQUIRE(box.Persist());
  CHECK(box.held() == 0);
  ResultOutbox again(tmp / "outbox");
  auto all = again.All();
  REQUIRE(all.size() == 2);
  CHECK(all[0].run_id == 12);
  CHECK(all[0].complete["metric_value"] == 0.12);
  CHECK(all[0].log.size() == 20'000);
  CHECK(all[1].node_rank == 1);
  CHECK(all[1].complete["action"] == "complete");
  again.Remove(12, 1);
  again.Remove(12);
  CHECK(again.empty());
  CHECK_FALSE(fs::exists(tmp / "outbox/12.json.bad"));
}

TEST_CASE("ResultOutbox keeps results across a restart, and sets aside a damaged file",
          "[worker][outbox]") {
  testing::TempDir tmp;
  {
    ResultOutbox box(tmp / "outbox");
    CHECK(box.empty());
    PendingResult r;
    r.run_id = 7;
    r.complete = {{"token", 3}, {"outcome", "succeeded"}, {"metric_value", 0.5}};
    r.points = nlohmann::json::array({{{"name", "accuracy"}, {"value", 0.5}}});
    r.log = std::string("bytes \xff not utf-8\n");
    r.log_offset = 12;
    REQUIRE(box.Put(r));
    r.run_id = 3;
    REQUIRE(box.Put(r));
  }
  REQUIRE(WriteFile(tmp / "outbox/9.json", "{\"run_id\": 9, trunc"));
  ResultOutbox again(tmp / "outbox");
  auto all = again.All();
  REQUIRE(all.size() == 2);
  CHECK(all[0].run_id == 3);
  CHECK(all[1].run_id == 7);
  CHECK(all[1].token() == 3);
  CHECK(all[1].log_offset == 12);
  CHECK(all[1].points.size() == 1);
  CHECK(fs::exists(tmp / "outbox/9.json.bad"));
  again.Remove(3);
  again.Remove(7);
  CHECK(again.empty());
  // The output's tail: all of it when small, else the end after a note.
  REQUIRE(WriteFile(tmp / "log", "0123456789"));
  CHECK(ResultOutbox::LogTail(tmp / "log", 4) == "456789");
  CHECK(ResultOutbox::LogTail(tmp / "log", 10) == "");
  REQUIRE(WriteFile(tmp / "big", std::string(ResultOutbox::kMaxLogTail + 100, 'x') + "end\n"));
  auto tail = ResultOutbox::LogTail(tmp / "big", 0);
  CHECK_THAT(tail, Catch::StartsWith("[trainq: 104 bytes of output left out"));
  CHECK_THAT(tail, Catch::EndsWith("end\n"));
}

}  // namespace
}  // namespace trainq
