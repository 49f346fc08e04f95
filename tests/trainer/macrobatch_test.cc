#include "trainer/macrobatch.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

std::vector<std::int64_t> Rows(std::int64_t n, std::int64_t step = 1) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(i * step);
  return v;
}

std::multiset<std::int64_t> Flatten(const std::vector<std::vector<std::int64_t>>& plan) {
  std::multiset<std::int64_t> out;
  for (const auto& m : plan) out.insert(m.begin(), m.end());
  return out;
}

TEST_CASE("a macrobatch plan holds every row exactly once") {
  const auto rows = Rows(103, 3);
  for (std::int64_t epoch = 1; epoch <= 3; ++epoch) {
    auto plan = PlanMacroBatches(rows, 20, 9, epoch, true);
    CHECK(plan.size() == 6);
    CHECK(Flatten(plan) == std::multiset<std::int64_t>(rows.begin(), rows.end()));
    for (const auto& m : plan) CHECK(std::is_sorted(m.begin(), m.end()));
  }
}

TEST_CASE("the plan changes across epochs, not across calls") {
  const auto rows = Rows(100);
  auto a = PlanMacroBatches(rows, 10, 9, 1, true);
  CHECK(a == PlanMacroBatches(rows, 10, 9, 1, true));
  CHECK(a != PlanMacroBatches(rows, 10, 9, 2, true));
  CHECK(a != PlanMacroBatches(rows, 10, 10, 1, true));
  auto ordered = PlanMacroBatches(rows, 10, 9, 1, false);
  CHECK(ordered[0] == Rows(10));
  CHECK(ordered[9].back() == 99);
}

TEST_CASE("shuffled macrobatches mix rows from all over the file, in runs of consecutive rows") {
  // A file sorted by class: rows 0..999, class = row / 250. With one block per
  // macrobatch (the chunking of before) a macrobatch of 100 holds one or two
  // classes; with 16 blocks of 7 rows each macrobatch holds rows of every class.
  const auto rows = Rows(1000);
  auto classes = [](const std::vector<std::int64_t>& m) {
    std::set<std::int64_t> c;
    for (std::int64_t r : m) c.insert(r / 250);
    return c.size();
  };
  auto runs = [](const std::vector<std::int64_t>& m) {  // sequential reads needed
    std::size_t n = m.empty() ? 0 : 1;
    for (std::size_t i = 1; i < m.size(); ++i) n += m[i] != m[i - 1] + 1;
    return n;
  };
  for (std::int64_t epoch = 1; epoch <= 3; ++epoch) {
    auto one = PlanMacroBatches(rows, 100, 5, epoch, true, 1);
    auto mixed = PlanMacroBatches(rows, 100, 5, epoch, true, 16);
    REQUIRE(mixed.size() == 10);
    CHECK(Flatten(mixed) == std::multiset<std::int64_t>(rows.begin(), rows.end()));
    std::size_t most_one = 0;
    for (const auto& m : one) most_one = std::max(most_one, classes(m));
    CHECK(most_one <= 2);
    for (const auto& m : mixed) {
      CHECK(m.size() == 100);
      CHECK(std::is_sorted(m.begin(), m.end()));
      CHECK(classes(m) == 4);
      CHECK(runs(m) <= 17);  // 15 blocks of 7 rows, split at most at both ends
    }
  }
}

TEST_CASE("a macro_batch_size of 0 is one macrobatch") {
  auto plan = PlanMacroBatches(Rows(7), 0, 1, 1, true);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0] == Rows(7));
}

TEST_CASE("the reader yields every macrobatch of the plan with at most two alive") {
  testing::TempDir dir;
  std::vector<float> values;
  for (int r = 0; r < 50; ++r) values.insert(values.end(), {static_cast<float>(r), static_cast<float>(r % 2)});
  REQUIRE(WriteF32(dir / "d.f32", values));
  DataSpec d;
  d.path = dir / "d.f32";
  d.format = "f32";
  d.columns = 2;
  auto src = OpenRowSource(d, {});
  REQUIRE(src.has_value());
  Normalizer norm;
  auto plan = PlanMacroBatches(Rows(50), 8, 2, 1, true);
  MacroBatchReader reader(**src, norm, plan);
  MacroBatch mb;
  std::multiset<std::int64_t> seen;
  std::int64_t count = 0;
  while (true) {
    auto more = reader.Next(&mb);
    REQUIRE(more.has_value());
    if (!*more) break;
    CHECK(mb.index == count);
    CHECK(mb.rows == plan[static_cast<std::size_t>(count)]);
    REQUIRE(mb.block.rows == static_cast<std::int64_t>(mb.rows.size()));
    for (std::size_t i = 0; i < mb.rows.size(); ++i) {
      CHECK(mb.block.x[i] == static_cast<float>(mb.rows[i]));  // the feature is the row number
      seen.insert(mb.rows[i]);
    }
    ++count;
  }
  CHECK(count == 7);
  const auto all = Rows(50);
  CHECK(seen == std::multiset<std::int64_t>(all.begin(), all.end()));
  CHECK(reader.max_alive() <= 2);
}

TEST_CASE("the reader can be destroyed before the plan ends") {
  testing::TempDir dir;
  REQUIRE(WriteF32(dir / "d.f32", std::vector<float>(200, 1.0f)));
  DataSpec d;
  d.path = dir / "d.f32";
  d.format = "f32";
  d.columns = 2;
  auto src = OpenRowSource(d, {});
  REQUIRE(src.has_value());
  Normalizer norm;
  MacroBatchReader reader(**src, norm, PlanMacroBatches(Rows(100), 10, 1, 1, true));
  MacroBatch mb;
  auto first = reader.Next(&mb);
  REQUIRE(first.has_value());
  CHECK(*first);
}

}  // namespace
}  // namespace trainq::trainer
