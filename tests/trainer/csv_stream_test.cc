// CSV and gzip CSV streamed from disk: gzip access points, rows per split
// against the in-memory reading, macrobatches of a streamed file, and data
// errors (malformed row, truncated gzip) naming file and row.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <set>

#include "core/strings.h"
#include "tests/support/temp_dir.h"
#include "trainer/data.h"
#include "trainer/file_reader.h"
#include "trainer/macrobatch.h"

namespace trainq::trainer {
namespace {

// Row r: "r,<r mod 7 / 4>,<noise>,<r mod 3>" (3 features, the class last).
std::string CsvText(std::int64_t rows, bool header) {
  std::mt19937 gen(5);
  std::string text = header ? "id,a,b,class\n" : "";
  for (std::int64_t r = 0; r < rows; ++r) {
    text += std::to_string(r) + "," + FormatDouble(static_cast<double>(r % 7) / 4, 2) + "," +
            std::to_string(gen() % 100000) + "," + std::to_string(r % 3);
    text += r % 11 == 0 ? "\r\n" : "\n";  // some CRLF lines
    if (r % 97 == 5) text += "\n";        // and some blank lines
  }
  return text;
}

// Writes `text` gzip-compressed: `members` concatenated gzip members, each
// with a sync flush every `flush_every` bytes so that even a small file has
// many deflate blocks (and so many access points).
void WriteGzip(const std::string& path, const std::string& text, int members = 1,
               std::size_t flush_every = 0) {
  std::filesystem::remove(path);
  const std::size_t per =
      (text.size() + static_cast<std::size_t>(members) - 1) / static_cast<std::size_t>(members);
  for (int m = 0; m < members; ++m) {
    gzFile f = gzopen(path.c_str(), "ab");
    REQUIRE(f != nullptr);
    const std::size_t from = static_cast<std::size_t>(m) * per,
                      to = std::min(text.size(), from + per);
    for (std::size_t at = from; at < to;) {
      const std::size_t n = flush_every > 0 ? std::min(flush_every, to - at) : to - at;
      REQUIRE(gzwrite(f, text.data() + at, static_cast<unsigned>(n)) == static_cast<int>(n));
      if (flush_every > 0) gzflush(f, Z_SYNC_FLUSH);
      at += n;
    }
    REQUIRE(gzclose(f) == Z_OK);
  }
}

DataSpec Spec(const std::string& path) {
  DataSpec d;
  d.path = path;
  d.format = path.ends_with(".gz") ? "csv.gz" : "csv";
  return d;
}

StreamOptions Streamed(std::int64_t checkpoint_rows = 7, std::int64_t span = 2000) {
  StreamOptions o;
  o.stream = true;
  o.checkpoint_rows = checkpoint_rows;
  o.gzip_span_bytes = span;
  return o;
}

TEST_CASE("a gzip file is read from its access points, across members") {
  testing::TempDir dir;
  const std::string text = CsvText(3000, true);
  WriteGzip(dir / "d.gz", text, 3, 700);
  auto first = FileReader::Open(dir / "d.gz", true, 1500);
  REQUIRE(first.has_value());
  std::string all(text.size() + 10, '\0');
  std::size_t got = 0;
  while (true) {
    auto n = (*first)->Read(all.data() + got, std::min<std::size_t>(999, all.size() - got));
    REQUIRE(n.has_value());
    if (*n == 0) break;
    got += *n;
  }
  all.resize(got);
  REQUIRE(all == text);
  const auto points = (*first)->TakeAccessPoints();
  CHECK(points.size() > 20);  // about one per 1500 bytes

  auto reader = FileReader::Open(dir / "d.gz", true);
  REQUIRE(reader.has_value());
  std::mt19937_64 gen(3);
  for (int i = 0; i < 60; ++i) {
    // Backwards and forwards, near and far (the last members too).
    const std::int64_t at = static_cast<std::int64_t>(gen() % text.size());
    REQUIRE((*reader)->Seek(at, points).has_value());
    CHECK((*reader)->position() == at);
    std::string buf(300, '\0');
    auto n = (*reader)->Read(buf.data(), buf.size());
    REQUIRE(n.has_value());
    buf.resize(*n);
    CHECK(buf == text.substr(static_cast<std::size_t>(at), 300));
  }
}

TEST_CASE("streamed CSV and gzip CSV give the same rows per split as the in-memory reading") {
  testing::TempDir dir;
  const std::string text = CsvText(1000, true);
  REQUIRE(WriteFile(dir / "d.csv", text));
  WriteGzip(dir / "d.csv.gz", text, 2, 1000);
  SplitSpec split;
  split.train = 0.6;
  split.validation = 0.2;
  split.split_seed = 4;
  for (const std::string name : {"d.csv", "d.csv.gz"}) {
    SECTION(name) {
      auto memory = OpenRowSource(Spec(dir / name), {.integer_labels = true});
      auto stream = OpenRowSource(Spec(dir / name), {.integer_labels = true}, Streamed());
      REQUIRE(memory.has_value());
      REQUIRE(stream.has_value());
      CHECK((*memory)->in_memory());
      CHECK_FALSE((*stream)->in_memory());
      REQUIRE((*stream)->rows() == 1000);
      REQUIRE((*stream)->feature_count() == 3);
      auto a = SplitDataset((*memory)->rows(), split);
      auto b = SplitDataset((*stream)->rows(), split);
      REQUIRE(a.has_value());
      REQUIRE(b.has_value());
      CHECK(a->train == b->train);
      CHECK(a->validation == b->validation);
      CHECK(a->test == b->test);
      auto norm_a = FitNormalizer(**memory, a->train, "standard");
      auto norm_b = FitNormalizer(**stream, b->train, "standard");
      REQUIRE(norm_a.has_value());
      REQUIRE(norm_b.has_value());
      CHECK(norm_a->shift == norm_b->shift);
      CHECK(norm_a->scale == norm_b->scale);
      for (const auto* rows : {&a->train, &a->validation, &a->test}) {
        auto x = ReadRows(**memory, *rows, *norm_a);
        auto y = ReadRows(**stream, *rows, *norm_b);
        REQUIRE(x.has_value());
        REQUIRE(y.has_value());
        CHECK(x->x == y->x);
        CHECK(x->y == y->y);
      }
      // ReadSplits: the same in one read of the file.
      for (bool keep_train : {false, true}) {
        auto one = ReadSplits(**stream, *b, "standard", keep_train);
        REQUIRE(one.has_value());
        CHECK(one->norm.shift == norm_a->shift);
        CHECK(one->norm.scale == norm_a->scale);
        CHECK(one->validation.x == ReadRows(**memory, a->validation, *norm_a)->x);
        CHECK(one->test.y == ReadRows(**memory, a->test, *norm_a)->y);
        CHECK(one->train.rows == (keep_train ? 600 : 0));
        if (keep_train) CHECK(one->train.x == ReadRows(**memory, a->train, *norm_a)->x);
      }
      // Any order, repeats, backwards: each row is the file's row.
      std::vector<std::int64_t> shuffled = a->train;
      shuffled.push_back(shuffled[3]);
      std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(8));
      auto y = ReadRows(**stream, shuffled, Normalizer{});
      REQUIRE(y.has_value());
      for (std::size_t i = 0; i < shuffled.size(); ++i) {
        CHECK(y->x[i * 3] == static_cast<float>(shuffled[i]));
        CHECK(y->y[i] == static_cast<float>(shuffled[i] % 3));
      }
    }
  }
}

TEST_CASE("macrobatches streamed from CSV and gzip CSV hold every training row once per epoch") {
  testing::TempDir dir;
  const std::string text = CsvText(130, false);
  REQUIRE(WriteFile(dir / "d.csv", text));
  WriteGzip(dir / "d.csv.gz", text, 1, 300);
  SplitSpec split;
  split.train = 100;
  split.split_seed = 2;
  for (const std::string name : {"d.csv", "d.csv.gz"}) {
    SECTION(name) {
      auto source = OpenRowSource(Spec(dir / name), {}, Streamed(16, 500));
      REQUIRE(source.has_value());
      auto rows = SplitDataset((*source)->rows(), split);
      REQUIRE(rows.has_value());
      REQUIRE(rows->train.size() == 100);
      const std::multiset<std::int64_t> expected(rows->train.begin(), rows->train.end());
      std::vector<std::vector<std::int64_t>> orders;
      for (std::int64_t epoch = 1; epoch <= 3; ++epoch) {
        auto plan = PlanMacroBatches(rows->train, 32, split.split_seed, epoch, true);
        std::vector<std::size_t> sizes;
        for (const auto& m : plan) sizes.push_back(m.size());
        CHECK(sizes.size() == 4);
        CHECK(std::count(sizes.begin(), sizes.end(), 32u) == 3);
        CHECK(std::count(sizes.begin(), sizes.end(), 4u) ==
              1);                   // the short one, anywhere in the order
        const Normalizer identity;  // the reader keeps a reference
        MacroBatchReader reader(**source, identity, plan);
        MacroBatch mb;
        std::vector<std::int64_t> seen;
        while (true) {
          auto more = reader.Next(&mb);
          REQUIRE(more.has_value());
          if (!*more) break;
          REQUIRE(mb.block.rows == static_cast<std::int64_t>(mb.rows.size()));
          for (std::size_t i = 0; i < mb.rows.size(); ++i) {
            // Feature 0 is the row's ordinal: the block holds the rows it names.
            CHECK(mb.block.x[i * 3] == static_cast<float>(mb.rows[i]));
            seen.push_back(mb.rows[i]);
          }
        }
        CHECK(reader.max_alive() <= 2);
        CHECK(std::multiset<std::int64_t>(seen.begin(), seen.end()) == expected);
        orders.push_back(seen);
      }
      CHECK(orders[0] != orders[1]);  // the macrobatches change across epochs
    }
  }
}

TEST_CASE("a malformed row in a streamed file is a data error naming file and row") {
  testing::TempDir dir;
  std::string text = CsvText(1300, false);
  // Line 1234 loses its last column.
  std::size_t at = 0;
  for (int line = 1; line < 1234; ++line) at = text.find('\n', at) + 1;
  std::size_t end = text.find('\n', at);
  const std::size_t comma = text.rfind(',', end);
  text.erase(comma, end - comma);
  REQUIRE(WriteFile(dir / "x.csv", text));
  WriteGzip(dir / "x.csv.gz", text);
  for (const std::string name : {"x.csv", "x.csv.gz"}) {
    for (bool stream : {false, true}) {
      StreamOptions o = Streamed();
      o.stream = stream;
      auto s = OpenRowSource(Spec(dir / name), {}, o);
      REQUIRE_FALSE(s.has_value());
      CHECK(s.error().kind == ErrorKind::kCorruption);
      CHECK_THAT(s.error().message,
                 Catch::Contains(name + ": row 1234: expected 4 columns, found 3"));
    }
  }
}

TEST_CASE("a truncated gzip file is a data error naming file and row") {
  testing::TempDir dir;
  const std::string text = CsvText(5000, false);
  WriteGzip(dir / "t.csv.gz", text);
  const auto size = std::filesystem::file_size(dir / "t.csv.gz");
  std::filesystem::resize_file(dir / "t.csv.gz", size / 2);
  for (bool stream : {false, true}) {
    StreamOptions o = Streamed();
    o.stream = stream;
    auto s = OpenRowSource(Spec(dir / "t.csv.gz"), {}, o);
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().kind == ErrorKind::kCorruption);
    CHECK_THAT(s.error().message,
               Catch::Matches(".*t\\.csv\\.gz: row [0-9]+: the gzip data ends early "
                              "\\(the file is truncated\\).*"));
  }
  // Not gzip at all.
  REQUIRE(WriteFile(dir / "p.csv.gz", "1,2,3\n"));
  auto plain = OpenRowSource(Spec(dir / "p.csv.gz"), {}, Streamed());
  REQUIRE_FALSE(plain.has_value());
  CHECK_THAT(plain.error().message, Catch::Contains("p.csv.gz: row 1: corrupt gzip data"));
}

TEST_CASE("a streamed CSV with header lines and no final newline reads every row") {
  testing::TempDir dir;
  std::string text = "# made by a test\nid,a,b,class\n" + CsvText(40, false);
  text.pop_back();  // no newline after the last row
  REQUIRE(WriteFile(dir / "h.csv", text));
  WriteGzip(dir / "h.csv.gz", text, 1, 64);
  for (const std::string name : {"h.csv", "h.csv.gz"}) {
    DataSpec d = Spec(dir / name);
    d.header = 2;
    auto s = OpenRowSource(d, {}, Streamed(3, 100));
    REQUIRE(s.has_value());
    REQUIRE((*s)->rows() == 40);
    std::vector<std::int64_t> rows{39, 0, 38, 1, 20, 21, 3, 39};
    auto block = ReadRows(**s, rows, Normalizer{});
    REQUIRE(block.has_value());
    for (std::size_t i = 0; i < rows.size(); ++i)
      CHECK(block->x[i * 3] == static_cast<float>(rows[i]));
  }
}

TEST_CASE("a streamed file that changes after opening is a data error, not wrong rows") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "d.csv", CsvText(50, false)));
  auto s = OpenRowSource(Spec(dir / "d.csv"), {}, Streamed());
  REQUIRE(s.has_value());
  REQUIRE(WriteFile(dir / "d.csv", CsvText(20, false)));
  auto block = ReadRows(**s, {40}, Normalizer{});
  REQUIRE_FALSE(block.has_value());
  CHECK_THAT(block.error().message, Catch::Contains("d.csv: the file changed since it was opened"));
}

}  // namespace
}  // namespace trainq::trainer
