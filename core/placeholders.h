// `{name}` placeholders in commands and templates: the one scanner that the
// manifest check, sweep specs, sweep points and the run executor share.
//
// `{name}` is trainq's: a name of letters, digits, '_', '.' and '-' starting
// with a letter or '_'. `${VAR}` and `$VAR` belong to the shell and are never
// placeholders; neither are `{}` or braces around anything else (JSON, awk).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainq {

struct Placeholder {
  std::size_t pos = 0;   // where the '{' is
  std::size_t size = 0;  // length including both braces
  std::string name;
};

// Every `{name}` placeholder of `text`, left to right.
std::vector<Placeholder> FindPlaceholders(std::string_view text);

// `text` with each placeholder replaced by value(name); a placeholder whose
// value is nullopt is left as written.
std::string FillPlaceholders(std::string_view text,
                             const std::function<std::optional<std::string>(const std::string&)>& value);

}  // namespace trainq
