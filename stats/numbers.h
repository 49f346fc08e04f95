// Plain files of numbers, one per line, as `trainq stats` reads them.
#pragma once

#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq::stats {

struct NumberLine {
  int line = 0;      // 1-based
  double value = 0;  // may be NaN or infinite: the caller warns and leaves it out
};

// Parses `text`: one number per line in C locale syntax ("0.66", "-1e-3",
// "+2"); "#" starts a comment; blank lines are skipped; "nan" and "inf" parse
// to non-finite values. Errors (invalid_argument) name the place, e.g.
// `a.txt:3: not a number: "abc"`, with `source` as the file name. No numbers
// at all is an error too: an empty batch is almost always a wrong path.
Result<std::vector<NumberLine>> ParseNumberLines(std::string_view text, std::string_view source);

}  // namespace trainq::stats
