#include "agent/results/palette.h"

#include <utility>

namespace trainq {

std::string PaletteCss() {
  using namespace palette;
  const std::pair<std::string_view, std::string_view> colours[] = {
      {"fg", kFg},
      {"muted", kMuted},
      {"line", kLine},
      {"bg", kBg},
      {"card", kCard},
      {"accent", kAccent},
      {"better", kBetter},
      {"worse", kWorse},
      {"noise", kNoise},
      {"negligible", kNegligible},
      {"equivalent", kEquivalent},
  };
  std::string css = ":root{";
  for (const auto& [name, hex] : colours) {
    css += "--";
    css += name;
    css += ':';
    css += hex;
    css += ';';
  }
  return css + "}\n";
}

}  // namespace trainq
