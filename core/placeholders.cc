#include "core/placeholders.h"

namespace trainq {

namespace {

bool NameStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool NameChar(char c) {
  return NameStart(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

}  // namespace

std::vector<Placeholder> FindPlaceholders(std::string_view text) {
  std::vector<Placeholder> out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '{') continue;
    if (i > 0 && text[i - 1] == '$') continue;  // ${VAR}: the shell's
    std::size_t j = i + 1;
    if (j >= text.size() || !NameStart(text[j])) continue;
    while (j < text.size() && NameChar(text[j])) ++j;
    if (j >= text.size() || text[j] != '}') continue;
    out.push_back({i, j - i + 1, std::string(text.substr(i + 1, j - i - 1))});
    i = j;
  }
  return out;
}

std::string FillPlaceholders(
    std::string_view text,
    const std::function<std::optional<std::string>(const std::string&)>& value) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  for (const auto& p : FindPlaceholders(text)) {
    auto v = value(p.name);
    if (!v) continue;
    out.append(text.substr(at, p.pos - at));
    out += *v;
    at = p.pos + p.size;
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace trainq
