#include "core/strings.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/file_size_limit.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

TEST_CASE("ParseDurationSeconds accepts units and combinations", "[strings]") {
  CHECK(ParseDurationSeconds("90").value() == 90);
  CHECK(ParseDurationSeconds("90s").value() == 90);
  CHECK(ParseDurationSeconds("15m").value() == 900);
  CHECK(ParseDurationSeconds("2h").value() == 7200);
  CHECK(ParseDurationSeconds("1d").value() == 86400);
  CHECK(ParseDurationSeconds("1h30m").value() == 5400);
  CHECK(ParseDurationSeconds(" 5m ").value() == 300);
}

TEST_CASE("ParseDurationSeconds rejects what it cannot read", "[strings]") {
  for (const char* bad : {"", "ten", "5x", "1h30", "h", "-5m", "1.5h"}) {
    INFO(bad);
    auto r = ParseDurationSeconds(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == ErrorKind::kInvalidArgument);
    CHECK(r.error().message.find("duration") != std::string::npos);
  }
}

TEST_CASE("FormatDuration picks the largest unit", "[strings]") {
  CHECK(FormatDuration(0) == "0s");
  CHECK(FormatDuration(42'000) == "42s");
  CHECK(FormatDuration(125'000) == "2m05s");
  CHECK(FormatDuration(3'725'000) == "1h02m05s");
  CHECK(FormatDuration(-5) == "0s");
}

TEST_CASE("FormatTimestamp is UTC", "[strings]") {
  CHECK(FormatTimestamp(0) == "1970-01-01 00:00:00");
  CHECK(FormatTimestamp(1'700'000'000'000) == "2023-11-14 22:13:20");
}

TEST_CASE("Substitute replaces known keys only", "[strings]") {
  std::map<std::string, std::string> vars = {{"seed", "7"}, {"repeat", "2"}};
  CHECK(Substitute("train --seed {seed} --r {repeat}", vars) == "train --seed 7 --r 2");
  CHECK(Substitute("{unknown} {seed}", vars) == "{unknown} 7");
  CHECK(Substitute("python -c 'd={}' {seed", vars) == "python -c 'd={}' {seed");
}

TEST_CASE("ShellQuote survives a round trip through sh", "[strings]") {
  std::string tricky = "it's a \"dir\" with $HOME and `x`";
  std::string out;
  REQUIRE(testing::RunShell("printf %s " + ShellQuote(tricky), &out) == 0);
  CHECK(out == tricky);
}

TEST_CASE("FormatDouble is fixed precision and names non-finite values", "[strings]") {
  CHECK(FormatDouble(0.66421, 4) == "0.6642");
  CHECK(FormatDouble(std::nan(""), 3) == "nan");
  CHECK(FormatDouble(-1.0 / 0.0, 3) == "-inf");
}

TEST_CASE("Split keeps empty fields", "[strings]") {
  CHECK(Split("a,,b", ',') == std::vector<std::string>{"a", "", "b"});
  CHECK(Split("", ',') == std::vector<std::string>{""});
  CHECK(Trim("  x y \n") == "x y");
}

TEST_CASE("ReadFile and WriteFile round trip, a missing file is not_found", "[strings]") {
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "f.txt", "hello\n"));
  CHECK(ReadFile(dir / "f.txt").value() == "hello\n");
  auto missing = ReadFile(dir / "nope.txt");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().kind == ErrorKind::kNotFound);
  CHECK(missing.error().message.find("nope.txt") != std::string::npos);
}

TEST_CASE("WriteFile reports a full disk with the path and the reason", "[strings][disk]") {
  // /dev/full: every write fails with ENOSPC.
  auto st = WriteFile("/dev/full", std::string(100'000, 'x'));
  REQUIRE_FALSE(st);
  CHECK(st.error().kind == ErrorKind::kIo);
  CHECK_THAT(st.error().message, Catch::Contains("/dev/full"));
  CHECK_THAT(st.error().message, Catch::Contains("No space left on device"));
}

TEST_CASE("WriteFileDurably replaces a file whole or not at all, and says why not",
          "[strings][disk]") {
  testing::TempDir dir;
  const std::string path = dir / "kept.json";
  REQUIRE(WriteFileDurably(path, "old contents\n"));
  CHECK(ReadFile(path).value() == "old contents\n");
  {
    // A write past the limit fails (EFBIG): the old contents stay, no
    // temporary file is left, and the error names the file.
    testing::FileSizeLimit limit(4096);
    auto st = WriteFileDurably(path, std::string(10'000, 'n'));
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Catch::Contains("kept.json.tmp"));
    CHECK_THAT(st.error().message, Catch::Contains("File too large"));
  }
  CHECK(ReadFile(path).value() == "old contents\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // Into a folder that does not exist: refused, nothing made.
  auto nowhere = WriteFileDurably(dir / "no/such/dir/x", "x");
  REQUIRE_FALSE(nowhere);
  CHECK_THAT(nowhere.error().message, Catch::Contains("no/such/dir/x.tmp"));
  REQUIRE(WriteFileDurably(path, "new\n"));
  CHECK(ReadFile(path).value() == "new\n");
}

TEST_CASE("ShortSha cuts a commit id to 10 characters, or as many as asked", "[strings]") {
  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  CHECK(ShortSha(sha) == "0123456789");
  CHECK(ShortSha(sha, kReportShaChars) == "0123456");
  CHECK(ShortSha("abc") == "abc");  // shorter than the cut: unchanged
  CHECK(ShortSha("") == "");
}

TEST_CASE("HtmlEscape escapes the characters that end text or an attribute", "[strings]") {
  CHECK(HtmlEscape("a < b && c > \"d\"") == "a &lt; b &amp;&amp; c &gt; &quot;d&quot;");
  CHECK(HtmlEscape("plain 'text' ±") == "plain 'text' ±");
}
