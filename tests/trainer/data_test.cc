#include "trainer/data.h"

#include <zlib.h>

#include <catch2/catch.hpp>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::trainer {
namespace {

DataSpec Csv(const std::string& path) {
  DataSpec d;
  d.path = path;
  d.format = "csv";
  return d;
}

TEST_CASE("a CSV with an sklearn header line is read, the header skipped") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", "3,2,a,b\n1.5,2,0\n3,4,1\n5,6.25,1\n"));
  auto src = OpenRowSource(Csv(dir / "d.csv"), {.integer_labels = true});
  REQUIRE(src.has_value());
  CHECK((*src)->rows() == 3);
  CHECK((*src)->feature_count() == 2);
  CHECK((*src)->label_count() == 1);
  auto block = ReadRows(**src, {2, 0}, Normalizer{});
  REQUIRE(block.has_value());
  CHECK(block->x == std::vector<float>{5, 6.25f, 1.5f, 2});
  CHECK(block->y == std::vector<float>{1, 0});
}

TEST_CASE("feature and label columns may be chosen, negative from the end") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", "1,2,3,4\n5,6,7,8\n"));
  DataSpec d = Csv(dir / "d.csv");
  d.features = {0, 2};
  d.labels = {-1, 1};
  auto src = OpenRowSource(d, {});
  REQUIRE(src.has_value());
  auto block = ReadRows(**src, {1}, Normalizer{});
  CHECK(block->x == std::vector<float>{5, 7});
  CHECK(block->y == std::vector<float>{8, 6});
  d.labels = {9};
  auto bad = OpenRowSource(d, {});
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message, Catch::Contains("names column 9 but rows have 4 columns"));
}

TEST_CASE("a bad CSV row is a data error naming file, row and column") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", "1,2,0\n3,x,1\n"));
  auto a = OpenRowSource(Csv(dir / "d.csv"), {});
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().kind == ErrorKind::kCorruption);
  CHECK_THAT(a.error().message, Catch::Contains("d.csv: row 2, column 2: 'x' is not a number"));

  REQUIRE(WriteFile(dir / "e.csv", "1,2,0\n3,4,1\n5,6\n"));
  auto b = OpenRowSource(Csv(dir / "e.csv"), {});
  REQUIRE_FALSE(b.has_value());
  CHECK_THAT(b.error().message, Catch::Contains("e.csv: row 3: expected 3 columns, found 2"));

  REQUIRE(WriteFile(dir / "f.csv", "1,2,0\n3,4,1.5\n"));
  auto c = OpenRowSource(Csv(dir / "f.csv"), {.integer_labels = true});
  REQUIRE_FALSE(c.has_value());
  CHECK_THAT(c.error().message, Catch::Contains("f.csv: row 2: class label 1.5000 is not a non-negative integer"));

  auto missing = OpenRowSource(Csv(dir / "nope.csv"), {});
  REQUIRE_FALSE(missing.has_value());
  CHECK_THAT(missing.error().message, Catch::Contains("nope.csv"));
}

TEST_CASE("spaces around CSV numbers are allowed, a field of two numbers is not") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", " 1.5 ,\t2 , 0\r\n-3e1,4,1\n"));
  auto src = OpenRowSource(Csv(dir / "d.csv"), {});
  REQUIRE(src.has_value());
  auto block = ReadRows(**src, {0, 1}, Normalizer{});
  CHECK(block->x == std::vector<float>{1.5f, 2, -30, 4});
  REQUIRE(WriteFile(dir / "e.csv", "1,2,0\n3,4 5,1\n"));
  auto e = OpenRowSource(Csv(dir / "e.csv"), {});
  REQUIRE_FALSE(e.has_value());
  CHECK_THAT(e.error().message, Catch::Contains("e.csv: row 2, column 2: '4 5' is not a number"));
  REQUIRE(WriteFile(dir / "f.csv", "1,2,0\n3,4,\n"));
  auto f = OpenRowSource(Csv(dir / "f.csv"), {});
  REQUIRE_FALSE(f.has_value());
  CHECK_THAT(f.error().message, Catch::Contains("f.csv: row 2, column 3: '' is not a number"));
}

TEST_CASE("gzip CSV is read") {
  testing::TempDir dir;
  const std::string path = dir / "d.csv.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  const std::string text = "1,2,0\n3,4,1\n";
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  DataSpec d = Csv(path);
  d.format = "csv.gz";
  auto src = OpenRowSource(d, {});
  REQUIRE(src.has_value());
  CHECK((*src)->rows() == 2);
}

TEST_CASE("f32 files are read from disk and checked up front") {
  testing::TempDir dir;
  REQUIRE(WriteF32(dir / "d.f32", {1, 2, 0, 3, 4, 1, 5, 6, 2}));
  DataSpec d;
  d.path = dir / "d.f32";
  d.format = "f32";
  d.columns = 3;
  auto src = OpenRowSource(d, {.integer_labels = true});
  REQUIRE(src.has_value());
  CHECK_FALSE((*src)->in_memory());
  CHECK((*src)->rows() == 3);
  auto block = ReadRows(**src, {0, 1, 2}, Normalizer{});
  CHECK(block->x == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(block->y == std::vector<float>{0, 1, 2});

  d.columns = 4;
  auto ragged = OpenRowSource(d, {});
  REQUIRE_FALSE(ragged.has_value());
  CHECK_THAT(ragged.error().message, Catch::Contains("not a whole number of 4-value float32 rows"));

  REQUIRE(WriteF32(dir / "nan.f32", {1, 2, 0, 3, NAN, 1}));
  d.path = dir / "nan.f32";
  d.columns = 3;
  auto nan = OpenRowSource(d, {});
  REQUIRE_FALSE(nan.has_value());
  CHECK_THAT(nan.error().message, Catch::Contains("nan.f32: row 2, column 2: value is not finite"));
}

TEST_CASE("the split depends on split_seed only, and covers rows once") {
  SplitSpec s;
  s.train = 0.6;
  s.validation = 0.2;
  s.split_seed = 1;
  auto a = SplitDataset(100, s);
  auto b = SplitDataset(100, s);
  REQUIRE(a.has_value());
  CHECK(a->train.size() == 60);
  CHECK(a->validation.size() == 20);
  CHECK(a->test.size() == 20);
  CHECK(a->train == b->train);
  std::vector<std::int64_t> all = a->train;
  all.insert(all.end(), a->validation.begin(), a->validation.end());
  all.insert(all.end(), a->test.begin(), a->test.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 100; ++i) CHECK(all[static_cast<std::size_t>(i)] == i);
  s.split_seed = 2;
  CHECK(SplitDataset(100, s)->train != a->train);

  SplitSpec ordered;
  ordered.train = 1437;
  ordered.test = 360;
  ordered.shuffle = false;
  auto o = SplitDataset(1797, ordered);
  REQUIRE(o.has_value());
  CHECK(o->train.front() == 0);
  CHECK(o->train.back() == 1436);
  CHECK(o->test.front() == 1437);

  ordered.train = 1500;
  auto too_many = SplitDataset(1797, ordered);
  REQUIRE_FALSE(too_many.has_value());
  CHECK_THAT(too_many.error().message, Catch::Contains("the file has 1797"));
}

TEST_CASE("normalisation is fitted on the training rows") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", "0,5,0\n2,5,0\n100,5,0\n"));
  auto src = OpenRowSource(Csv(dir / "d.csv"), {});
  REQUIRE(src.has_value());
  auto standard = FitNormalizer(**src, {0, 1}, "standard");
  REQUIRE(standard.has_value());
  auto block = ReadRows(**src, {0, 1, 2}, *standard);
  CHECK(block->x[0] == Approx(-1));
  CHECK(block->x[2] == Approx(1));
  CHECK(block->x[4] == Approx(99));  // row 2 is not a training row
  CHECK(block->x[1] == 0);           // a constant column is centred, not scaled
  auto minmax = FitNormalizer(**src, {0, 1, 2}, "minmax");
  auto mm = ReadRows(**src, {1}, *minmax);
  CHECK(mm->x[0] == Approx(0.02));
}

}  // namespace
}  // namespace trainq::trainer
