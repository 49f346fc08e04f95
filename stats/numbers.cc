#include "stats/numbers.h"

#include <charconv>
#include <string>
#include <system_error>

#include "core/strings.h"

namespace trainq::stats {

Result<std::vector<NumberLine>> ParseNumberLines(std::string_view text, std::string_view source) {
  std::vector<NumberLine> out;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    auto where = std::string(source) + ":" + std::to_string(line_no) + ": ";
    // from_chars is locale independent (a German locale must not turn "0.5"
    // into an error) but does not take a leading '+'.
    std::string_view digits = line.front() == '+' ? line.substr(1) : line;
    double value = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc::result_out_of_range) {
      return Fail(ErrorKind::kInvalidArgument,
                  where + "out of range for a double: \"" + std::string(line) + "\"");
    }
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
        (line.front() == '+' && digits.front() == '-')) {
      return Fail(ErrorKind::kInvalidArgument,
                  where + "not a number: \"" + std::string(line) + "\"");
    }
    out.push_back({line_no, value});
  }
  if (out.empty()) {
    return Fail(ErrorKind::kInvalidArgument, std::string(source) + ": no numbers in the file");
  }
  return out;
}

}  // namespace trainq::stats
