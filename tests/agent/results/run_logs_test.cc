// ReadLogTail, the dashboard run page's read of one log: a log retention
// archived (a real gzip written by ArchiveRunLogs) reads exactly as the plain
// file did, from every offset and for every limit, including limits that do
// not divide the 64 KiB stream buffer (the kept tail wraps).
#include "agent/results/run_logs.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

namespace fs = std::filesystem;

struct Read {
  std::int64_t from, size;
  bool skipped;
  std::string bytes;
};

std::vector<Read> ReadAll(const std::string& path, const std::vector<std::int64_t>& froms,
                          const std::vector<std::int64_t>& limits, bool archived) {
  std::vector<Read> out;
  for (auto max : limits) {
    for (auto from : froms) {
      INFO("max " << max << " from " << from);
      auto t = ReadLogTail(path, from, max);
      REQUIRE(t);
      CHECK(t->archived == archived);
      out.push_back({t->from, t->size, t->skipped, t->bytes});
    }
  }
  return out;
}

TEST_CASE("run logs: an archived log's tail reads as the plain log's did", "[run_logs]") {
  testing::TempDir tmp;
  fs::create_directories(tmp / "runs/7");
  std::string path = tmp / "runs/7/output.log";
  std::string text;
  for (int i = 0; text.size() < 300'000; ++i) text += "step " + std::to_string(i) + " loss 0.5\n";
  REQUIRE(WriteFile(path, text));
  const auto size = static_cast<std::int64_t>(text.size());
  const std::vector<std::int64_t> froms = {0, 1, 1000, size - 65'536, size - 100, size - 1, size,
                                           size + 5, -3};
  const std::vector<std::int64_t> limits = {0, 1, 1000, 65'535, 65'536, 100'000, 1 << 20};

  auto plain = ReadAll(path, froms, limits, false);
  // Spot checks against the text itself.
  auto t = ReadLogTail(path, size - 100, 1000).value();
  CHECK(t.from == size - 100);
  CHECK(t.size == size);
  CHECK_FALSE(t.skipped);
  CHECK(t.bytes == text.substr(text.size() - 100));
  t = ReadLogTail(path, 0, 1000).value();
  CHECK(t.skipped);
  CHECK(t.from == size - 1000);
  CHECK(t.bytes == text.substr(text.size() - 1000));
  t = ReadLogTail(path, size + 5, 1 << 20).value();  // past the end: a new attempt, from 0
  CHECK(t.from == 0);
  CHECK(t.bytes == text);

  REQUIRE(ArchiveRunLogs(path).value() == 1);
  REQUIRE_FALSE(fs::exists(path));
  REQUIRE(fs::exists(path + ".gz"));
  auto archived = ReadAll(path, froms, limits, true);
  REQUIRE(archived.size() == plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("read " << i << ": max " << limits[i / froms.size()] << " from " << froms[i % froms.size()]);
    CHECK(archived[i].from == plain[i].from);
    CHECK(archived[i].size == size);
    CHECK(archived[i].skipped == plain[i].skipped);
    CHECK(archived[i].bytes == plain[i].bytes);
  }
}

TEST_CASE("run logs: a missing log is an empty tail, a cut archive an error naming it",
          "[run_logs]") {
  testing::TempDir tmp;
  auto none = ReadLogTail(tmp / "runs/1/output.log", 10, 1000);
  REQUIRE(none);
  CHECK(none->size == 0);
  CHECK(none->from == 0);
  CHECK(none->bytes.empty());
  CHECK_FALSE(none->archived);

  fs::create_directories(tmp / "runs/2");
  std::string path = tmp / "runs/2/output.log", text;
  for (int i = 0; i < 20'000; ++i) text += std::to_string(i * 7919) + "\n";
  REQUIRE(WriteFile(path, text));
  REQUIRE(ArchiveRunLogs(path).value() == 1);
  fs::resize_file(path + ".gz", fs::file_size(path + ".gz") / 2);  // cut short
  auto cut = ReadLogTail(path, 0, 1000);
  REQUIRE_FALSE(cut);
  CHECK(cut.error().kind == ErrorKind::kIo);
  CHECK_THAT(cut.error().message, Catch::Contains("output.log.gz"));
}

}  // namespace
}  // namespace trainq
