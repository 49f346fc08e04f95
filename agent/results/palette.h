// The colours of trainq's pages, in one place. report.html and the sweep
// plots (report.cc, sweep_plot.cc) write them as they are; the dashboard
// takes them as CSS custom properties (`var(--better)`) from PaletteCss(),
// which serve answers as /dash/palette.css and report.html embeds in its
// <style>. A verdict is the same green or red on every surface.
#pragma once

#include <string>
#include <string_view>

namespace trainq::palette {

inline constexpr std::string_view kFg = "#1d2330";      // text
inline constexpr std::string_view kMuted = "#5d6675";   // secondary text
inline constexpr std::string_view kLine = "#d8dde5";    // borders, table rules
inline constexpr std::string_view kBg = "#f6f7f9";      // the page
inline constexpr std::string_view kCard = "#fff";       // a card, a plot
inline constexpr std::string_view kAccent = "#2457c5";  // links, a single series
inline constexpr std::string_view kBetter = "#17803d";  // verdicts
inline constexpr std::string_view kWorse = "#c2261c";
inline constexpr std::string_view kNoise = "#6b7280";
inline constexpr std::string_view kNegligible = "#8a6d00";
inline constexpr std::string_view kEquivalent = "#0f766e";

}  // namespace trainq::palette

namespace trainq {

// ":root{--fg:#1d2330;--muted:...}": every colour above as a CSS custom
// property named after it (kBetter: --better).
std::string PaletteCss();

}  // namespace trainq
