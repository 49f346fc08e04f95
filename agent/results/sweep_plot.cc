#include "agent/results/sweep_plot.h"
#include "agent/results/axis_ticks.h"
#include "agent/results/palette.h"
#include "core/strings.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

namespace trainq {

using nlohmann::json;

namespace {

constexpr double kW = 640, kH = 400, kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string Px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// One plotted point: x in data units (or a category index), y with an
// optional interval.
struct Mark {
  double x = 0, y = 0;
  std::optional<double> lo, hi;
  std::string title;
};

class Plot {
 public:
  Plot(std::string title, std::string xlabel, std::string ylabel, bool log_x)
      : title_(std::move(title)), xlabel_(std::move(xlabel)), ylabel_(std::move(ylabel)),
        log_x_(log_x) {}

  void SetCategories(std::vector<std::string> c) { categories_ = std::move(c); }

  std::string Render(const std::vector<Mark>& marks, bool line) const {
    double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
    for (const auto& m : marks) {
      double x = X(m.x);
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, m.lo.value_or(m.y));
      y1 = std::max(y1, m.hi.value_or(m.y));
    }
    if (!categories_.empty()) {
      x0 = -0.5;
      x1 = static_cast<double>(categories_.size()) - 0.5;
    }
    if (marks.empty()) {
      x0 = y0 = 0;
      x1 = y1 = 1;
    }
    if (x1 - x0 <= 0) {
      x0 -= 0.5;
      x1 += 0.5;
    }
    if (y1 - y0 <= 0) {
      double d = std::max(1e-9, 0.05 * std::fabs(y0));
      y0 -= d;
      y1 += d;
    }
    if (categories_.empty()) {
      double pad = (x1 - x0) * 0.05;
      x0 -= pad;
      x1 += pad;
    }
    double ypad = (y1 - y0) * 0.05;
    y0 -= ypad;
    y1 += ypad;
    auto sx = [&](double x) { return kLeft + (X(x) - x0) / (x1 - x0) * (kW - kLeft - kRight); };
    auto sy = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * (kH - kTop - kBottom); };
    std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Px(kW) +
                    "\" height=\"" + Px(kH) + "\" viewBox=\"0 0 " + Px(kW) + " " + Px(kH) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s += "<text x=\"" + Px(kW / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" +
         HtmlEscape(title_) + "</text>\n";
    // Axes and ticks.
    s += "<g stroke=\"#444\" fill=\"none\"><rect x=\"" + Px(kLeft) + "\" y=\"" + Px(kTop) +
         "\" width=\"" + Px(kW - kLeft - kRight) + "\" height=\"" + Px(kH - kTop - kBottom) +
         "\"/></g>\n";
    const AxisTicks yt = NiceTicks(y0, y1);
    for (double y : yt.values) {
      s += "<text class=\"ytick\" x=\"" + Px(kLeft - 6) + "\" y=\"" + Px(sy(y) + 4) +
           "\" text-anchor=\"end\">" + TickLabel(y, yt.decimals) + "</text>\n";
    }
    if (!categories_.empty()) {
      for (std::size_t i = 0; i < categories_.size(); ++i) {
        s += "<text x=\"" + Px(sx(static_cast<double>(i))) + "\" y=\"" + Px(kH - kBottom + 16) +
             "\" text-anchor=\"middle\">" + HtmlEscape(categories_[i]) + "</text>\n";
      }
    } else {
      // Round numbers in data units; on a log axis, powers of ten (or 1-2-5).
      const AxisTicks xt = log_x_ ? LogTicks(std::exp(x0), std::exp(x1)) : NiceTicks(x0, x1);
      for (double xv : xt.values) {
        double px = kLeft + (X(xv) - x0) / (x1 - x0) * (kW - kLeft - kRight);
        s += "<text class=\"xtick\" x=\"" + Px(px) + "\" y=\"" + Px(kH - kBottom + 16) +
             "\" text-anchor=\"middle\">" + TickLabel(xv, xt.decimals) + "</text>\n";
      }
    }
    s += "<text x=\"" + Px(kW / 2) + "\" y=\"" + Px(kH - 15) + "\" text-anchor=\"middle\">" +
         HtmlEscape(xlabel_) + (log_x_ ? " (log scale)" : "") + "</text>\n";
    s += "<text x=\"15\" y=\"" + Px(kH / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 15 " + Px(kH / 2) + ")\">" +
         HtmlEscape(ylabel_) + "</text>\n";
    if (line && marks.size() > 1) {
      s += "<polyline fill=\"none\" stroke=\"" + std::string(palette::kAccent) +
           "\" stroke-width=\"1.5\" points=\"";
      for (const auto& m : marks) s += Px(sx(m.x)) + "," + Px(sy(m.y)) + " ";
      s += "\"/>\n";
    }
    s += "<g class=\"points\">\n";
    for (const auto& m : marks) {
      s += "<g><title>" + HtmlEscape(m.title) + "</title>";
      if (m.lo && m.hi) {
        s += "<line x1=\"" + Px(sx(m.x)) + "\" x2=\"" + Px(sx(m.x)) + "\" y1=\"" + Px(sy(*m.lo)) +
             "\" y2=\"" + Px(sy(*m.hi)) + "\" stroke=\"" + std::string(palette::kAccent) + "\"/>";
      }
      s += "<circle class=\"point\" cx=\"" + Px(sx(m.x)) + "\" cy=\"" + Px(sy(m.y)) +
           "\" r=\"3.5\" fill=\"" + std::string(palette::kAccent) + "\"/></g>\n";
    }
    s += "</g>\n</svg>\n";
    return s;
  }

 private:
  double X(double x) const { return log_x_ ? std::log(x) : x; }

  std::string title_, xlabel_, ylabel_;
  bool log_x_;
  std::vector<std::string> categories_;
};

std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out;
}

std::string PointTitle(const PointResult& p) {
  std::string t = "point " + std::to_string(p.idx) + ": n=" + std::to_string(p.summary.n) +
                  " mean " + Num(p.summary.mean);
  if (p.summary.ci95) t += " [" + Num(p.summary.ci95->lo) + ", " + Num(p.summary.ci95->hi) + "]";
  return t;
}


bool IsNumeric(const SweepParam& p) {
  return p.kind != ParamKind::kChoice && p.kind != ParamKind::kValues;
}

bool IsLog(const SweepParam& p) {
  return p.kind == ParamKind::kLogUniform || (p.kind == ParamKind::kInt && p.log);
}

// A point's coordinate on a parameter's axis: the value (its log for log
// parameters) or the option's index; empty when the point has no usable value.
std::optional<double> Coordinate(const SweepParam& param, const json& params) {
  if (!params.contains(param.name)) return std::nullopt;
  const json& val = params[param.name];
  if (IsNumeric(param)) {
    if (!val.is_number()) return std::nullopt;
    double x = val.get<double>();
    if (!IsLog(param)) return x;
    if (!(x > 0)) return std::nullopt;
    return std::log(x);
  }
  auto it = std::find(param.options.begin(), param.options.end(), val);
  if (it == param.options.end()) return std::nullopt;
  return static_cast<double>(it - param.options.begin());
}

std::string OptionText(const json& o) { return o.is_string() ? o.get<std::string>() : o.dump(); }

std::string SvgHead(double w, double h) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Px(w) + "\" height=\"" + Px(h) +
         "\" viewBox=\"0 0 " + Px(w) + " " + Px(h) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n"
         "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

// From red (worst mean) through yellow to green (best): t in [0, 1], 1 = best.
std::string Ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  auto mix = [](double a, double b, double u) { return static_cast<int>(std::lround(a + (b - a) * u)); };
  int r, g, b;
  if (t < 0.5) {
    r = mix(215, 254, t * 2); g = mix(48, 224, t * 2); b = mix(39, 139, t * 2);
  } else {
    r = mix(254, 26, t * 2 - 1); g = mix(224, 152, t * 2 - 1); b = mix(139, 80, t * 2 - 1);
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// Parallel coordinates: one vertical axis per varying parameter and one for
// the metric; each measured point is a line across them, coloured by its mean
// (green best, red worst); the leader by the confidence bound is drawn last,
// thick and dark.
std::string ParallelSvg(const SweepView& v) {
  std::vector<const SweepParam*> axes;
  for (const auto& p : v.spec.params) {
    if (p.kind != ParamKind::kValue) axes.push_back(&p);
  }
  std::vector<const PointResult*> pts;
  for (const auto& p : v.points) {
    if (p.summary.n > 0) pts.push_back(&p);
  }
  const double w = std::max(kW, 140.0 * static_cast<double>(axes.size() + 1) + 60), h = kH;
  const double top = kTop + 10, bottom = kH - kBottom;
  const std::size_t n_axes = axes.size() + 1;
  auto ax_x = [&](std::size_t i) {
    return n_axes == 1 ? w / 2 : 60 + (w - 120) * static_cast<double>(i) / static_cast<double>(n_axes - 1);
  };
  // Per axis: the coordinate range, and tick labels.
  std::vector<double> lo(n_axes, std::numeric_limits<double>::infinity()), hi(n_axes, -lo[0]);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto& param = *axes[i];
    if (!IsNumeric(param)) {
      lo[i] = 0;
      hi[i] = std::max(1.0, static_cast<double>(param.options.size()) - 1);
      continue;
    }
    for (const auto* p : pts) {
      if (auto c = Coordinate(param, p->params)) {
        lo[i] = std::min(lo[i], *c);
        hi[i] = std::max(hi[i], *c);
      }
    }
  }
  for (const auto* p : pts) {
    lo[axes.size()] = std::min(lo[axes.size()], p->summary.mean);
    hi[axes.size()] = std::max(hi[axes.size()], p->summary.mean);
  }
  for (std::size_t i = 0; i < n_axes; ++i) {
    if (!(lo[i] <= hi[i])) lo[i] = 0, hi[i] = 1;
    if (hi[i] - lo[i] <= 0) lo[i] -= 0.5, hi[i] += 0.5;
  }
  auto ax_y = [&](std::size_t i, double c) {
    return bottom - (c - lo[i]) / (hi[i] - lo[i]) * (bottom - top);
  };
  auto label = [&](std::size_t i, double c) {
    if (i == axes.size()) return Num(c);
    const auto& param = *axes[i];
    if (!IsNumeric(param)) {
      auto k = static_cast<std::size_t>(std::lround(c));
      return k < param.options.size() ? OptionText(param.options[k]) : std::string();
    }
    return Num(IsLog(param) ? std::exp(c) : c);
  };
  std::string s = SvgHead(w, h);
  s += "<text x=\"" + Px(w / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" +
       HtmlEscape("sweep " + std::to_string(v.row.id) + ": every point across its parameters, "
              "coloured by mean " + v.metric) + "</text>\n";
  auto best = PickBest(v);
  // Colour by rank, not by value: one far-off point would paint all others alike.
  std::vector<double> sorted_means;
  for (const auto* p : pts) sorted_means.push_back(p->summary.mean);
  std::sort(sorted_means.begin(), sorted_means.end());
  auto goodness = [&](double mean) {
    if (sorted_means.size() < 2) return 1.0;
    auto lo_it = std::lower_bound(sorted_means.begin(), sorted_means.end(), mean);
    auto hi_it = std::upper_bound(sorted_means.begin(), sorted_means.end(), mean);
    double r = (static_cast<double>(lo_it - sorted_means.begin()) +
                static_cast<double>(hi_it - sorted_means.begin()) - 1) / 2;
    double t = r / static_cast<double>(sorted_means.size() - 1);
    return v.goal == "min" ? 1 - t : t;
  };
  // Worst first, so the better lines lie on top; the leader last.
  std::vector<const PointResult*> order = pts;
  std::stable_sort(order.begin(), order.end(), [&](const PointResult* a, const PointResult* b) {
    bool la = a == best.winner, lb = b == best.winner;
    if (la != lb) return lb;
    return goodness(a->summary.mean) < goodness(b->summary.mean);
  });
  s += "<g class=\"lines\" fill=\"none\">\n";
  for (const auto* p : order) {
    std::string pts_attr;
    bool ok = true;
    for (std::size_t i = 0; i < n_axes && ok; ++i) {
      std::optional<double> c = i == axes.size() ? std::optional<double>(p->summary.mean)
                                                 : Coordinate(*axes[i], p->params);
      if (!c) {
        ok = false;
        break;
      }
      pts_attr += Px(ax_x(i)) + "," + Px(ax_y(i, *c)) + " ";
    }
    if (!ok) continue;
    bool leader = p == best.winner;
    s += "<polyline class=\"point\" points=\"" + pts_attr + "\" stroke=\"" +
         (leader ? std::string(palette::kFg) : Ramp(goodness(p->summary.mean))) +
         "\" stroke-width=\"" + (leader ? "3" : "1.5") + "\" stroke-opacity=\"" +
         (leader ? "1" : "0.8") + "\"><title>" +
         HtmlEscape(PointTitle(*p) + (leader ? " (leader)" : "")) + "</title></polyline>\n";
  }
  s += "</g>\n";
  for (std::size_t i = 0; i < n_axes; ++i) {
    double x = ax_x(i);
    s += "<line x1=\"" + Px(x) + "\" x2=\"" + Px(x) + "\" y1=\"" + Px(top) + "\" y2=\"" +
         Px(bottom) + "\" stroke=\"#444\"/>\n";
    // (coordinate, label): categories by index; numbers at round values of
    // the parameter (1-2-5, or powers of ten on a log axis).
    std::vector<std::pair<double, std::string>> ticks;
    if (i < axes.size() && !IsNumeric(*axes[i])) {
      for (std::size_t k = 0; k < axes[i]->options.size(); ++k) {
        ticks.emplace_back(static_cast<double>(k), label(i, static_cast<double>(k)));
      }
    } else if (i < axes.size() && IsLog(*axes[i])) {
      const AxisTicks t = LogTicks(std::exp(lo[i]), std::exp(hi[i]));
      for (double v : t.values) ticks.emplace_back(std::log(v), TickLabel(v, t.decimals));
    } else {
      const AxisTicks t = NiceTicks(lo[i], hi[i]);
      for (double v : t.values) ticks.emplace_back(v, TickLabel(v, t.decimals));
    }
    for (const auto& [t, text] : ticks) {
      s += "<text x=\"" + Px(x + 4) + "\" y=\"" + Px(ax_y(i, t) + 4) + "\" font-size=\"10\">" +
           HtmlEscape(text) + "</text>\n";
    }
    std::string name = i == axes.size() ? v.metric + " (mean)"
                                         : axes[i]->name + (IsLog(*axes[i]) ? " (log)" : "");
    s += "<text x=\"" + Px(x) + "\" y=\"" + Px(bottom + 20) + "\" text-anchor=\"middle\">" +
         HtmlEscape(name) + "</text>\n";
  }
  s += "<text x=\"" + Px(w / 2) + "\" y=\"" + Px(h - 15) +
       "\" text-anchor=\"middle\" font-size=\"11\">colour by rank of the mean: green best, red worst; black: the leader by the confidence bound</text>\n";
  s += "</svg>\n";
  return s;
}

std::string ImportanceSvg(const SweepView& v, const std::vector<ParamImportance>& imp) {
  const double row = 28, left = 150, right = 90;
  const double h = std::max(kTop + 40 + row * static_cast<double>(imp.size()) + 40, 160.0);
  std::string s = SvgHead(kW, h);
  s += "<text x=\"" + Px(kW / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" +
       HtmlEscape("sweep " + std::to_string(v.row.id) + ": what each parameter explains of the ranks of mean " + v.metric +
              " (eta squared)") +
       "</text>\n";
  if (imp.empty()) {
    s += "<text x=\"" + Px(kW / 2) + "\" y=\"" + Px(h / 2) +
         "\" text-anchor=\"middle\">too few measured points (3 needed)</text>\n";
  }
  double y = kTop + 10;
  for (const auto& p : imp) {
    double bw = (kW - left - right) * std::clamp(p.eta2, 0.0, 1.0);
    double chance = p.points > 1 ? static_cast<double>(p.groups - 1) / (p.points - 1) : 1;
    s += "<g><title>" + HtmlEscape(p.name + ": eta squared " + Num(p.eta2) + " over " +
                               std::to_string(p.points) + " points in " +
                               std::to_string(p.groups) + " groups (chance alone: about " +
                               Num(chance) + ")") +
         "</title>";
    s += "<text x=\"" + Px(left - 8) + "\" y=\"" + Px(y + 14) + "\" text-anchor=\"end\">" +
         HtmlEscape(p.name) + "</text>";
    s += "<rect class=\"bar\" x=\"" + Px(left) + "\" y=\"" + Px(y + 2) + "\" width=\"" + Px(bw) +
         "\" height=\"" + Px(row - 8) + "\" fill=\"" + std::string(palette::kAccent) + "\"/>";
    double cx = left + (kW - left - right) * std::clamp(chance, 0.0, 1.0);
    s += "<line x1=\"" + Px(cx) + "\" x2=\"" + Px(cx) + "\" y1=\"" + Px(y) + "\" y2=\"" +
         Px(y + row - 4) + "\" stroke=\"" + std::string(palette::kWorse) +
         "\" stroke-dasharray=\"3,2\"/>";
    s += "<text x=\"" + Px(left + bw + 6) + "\" y=\"" + Px(y + 14) + "\">" + Num(p.eta2) +
         "</text></g>\n";
    y += row;
  }
  s += "<text x=\"" + Px(kW / 2) + "\" y=\"" + Px(h - 12) +
       "\" text-anchor=\"middle\" font-size=\"11\">red dashes: what chance alone gives with that many groups and points</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace

std::vector<ParamImportance> SweepImportance(const SweepView& v) {
  std::vector<ParamImportance> out;
  for (const auto& param : v.spec.params) {
    if (param.kind == ParamKind::kValue) continue;
    std::vector<std::pair<double, double>> xs;  // (coordinate, mean)
    for (const auto& p : v.points) {
      if (p.summary.n == 0) continue;
      if (auto c = Coordinate(param, p.params)) xs.emplace_back(*c, p.summary.mean);
    }
    if (xs.size() < 3) continue;
    std::sort(xs.begin(), xs.end());
    // Group ids: the option (lists) or the value when it has at most four
    // distinct values, else four bins of equal counts (ties kept together).
    std::vector<int> group(xs.size());
    std::vector<double> distinct;
    for (const auto& [c, m] : xs) {
      if (distinct.empty() || distinct.back() != c) distinct.push_back(c);
    }
    if (!IsNumeric(param) || distinct.size() <= 4) {
      for (std::size_t i = 0; i < xs.size(); ++i) {
        group[i] = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), xs[i].first) -
                                    distinct.begin());
      }
    } else {
      int g = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        if (i > 0 && xs[i].first != xs[i - 1].first &&
            static_cast<int>(i * 4 / xs.size()) > g) {
          g = static_cast<int>(i * 4 / xs.size());
        }
        group[i] = g;
      }
    }
    // On the ranks of the means (ties share their mean rank), as in
    // Kruskal-Wallis: one far-off point does not hide an ordering.
    {
      std::vector<std::size_t> order(xs.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](std::size_t a, std::size_t b) { return xs[a].second < xs[b].second; });
      std::vector<double> rank(xs.size());
      for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j + 1 < order.size() && xs[order[j + 1]].second == xs[order[i]].second) ++j;
        for (std::size_t k = i; k <= j; ++k) rank[order[k]] = (static_cast<double>(i + j) / 2) + 1;
        i = j + 1;
      }
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i].second = rank[i];
    }
    double mean = 0;
    for (const auto& [c, m] : xs) mean += m;
    mean /= static_cast<double>(xs.size());
    std::map<int, std::pair<double, int>> sums;
    double total = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      sums[group[i]].first += xs[i].second;
      sums[group[i]].second += 1;
      total += (xs[i].second - mean) * (xs[i].second - mean);
    }
    double between = 0;
    for (const auto& [g, sc] : sums) {
      double gm = sc.first / sc.second;
      between += sc.second * (gm - mean) * (gm - mean);
    }
    ParamImportance pi;
    pi.name = param.name;
    pi.eta2 = total > 0 ? between / total : 0;
    pi.groups = static_cast<int>(sums.size());
    pi.points = static_cast<int>(xs.size());
    out.push_back(pi);
  }
  return out;
}

std::map<std::string, std::string> SweepPlots(const SweepView& v) {
  std::map<std::string, std::string> files;
  const std::string ylabel = v.metric + " (" + v.goal + "), mean and 95% CI";
  for (const auto& param : v.spec.params) {
    if (param.kind == ParamKind::kValue) continue;
    bool numeric = param.kind != ParamKind::kChoice && param.kind != ParamKind::kValues;
    std::vector<std::string> cats;
    if (!numeric) {
      for (const auto& o : param.options) cats.push_back(o.is_string() ? o.get<std::string>() : o.dump());
    }
    bool log_x = param.kind == ParamKind::kLogUniform || (param.kind == ParamKind::kInt && param.log);
    std::vector<Mark> marks;
    for (const auto& p : v.points) {
      if (p.summary.n == 0 || !p.params.contains(param.name)) continue;
      const json& val = p.params[param.name];
      Mark m;
      if (numeric) {
        if (!val.is_number()) continue;
        m.x = val.get<double>();
        if (log_x && !(m.x > 0)) continue;
      } else {
        auto it = std::find(param.options.begin(), param.options.end(), val);
        if (it == param.options.end()) continue;
        m.x = static_cast<double>(it - param.options.begin());
      }
      m.y = p.summary.mean;
      if (p.summary.ci95) {
        m.lo = p.summary.ci95->lo;
        m.hi = p.summary.ci95->hi;
      }
      m.title = PointTitle(p);
      marks.push_back(m);
    }
    Plot plot("sweep " + std::to_string(v.row.id) + ": " + v.metric + " against " + param.name,
              param.name, ylabel, log_x);
    if (!numeric) plot.SetCategories(cats);
    files["param-" + SafeName(param.name) + ".svg"] = plot.Render(marks, false);
  }
  // Progress: after each point (in the order they were suggested), the
  // leader by the confidence bound among the points so far.
  std::vector<Mark> progress;
  SweepView so_far = v;
  so_far.points.clear();
  double runs = 0;
  for (const auto& p : v.points) {
    so_far.points.push_back(p);
    so_far.points.back().confirming = false;  // the pick as the search saw it then
    runs += static_cast<double>(p.summary.n);
    if (p.summary.n == 0) continue;
    auto best = PickBest(so_far);
    if (!best.winner) continue;
    Mark m;
    m.x = runs;
    m.y = best.winner->summary.mean;
    if (best.winner->summary.ci95) {
      m.lo = best.winner->summary.ci95->lo;
      m.hi = best.winner->summary.ci95->hi;
    }
    m.title = "after " + Num(runs) + " runs: leader " + PointTitle(*best.winner);
    progress.push_back(m);
  }
  Plot plot("sweep " + std::to_string(v.row.id) + ": the pick (leader by the confidence bound)",
            "runs spent", ylabel, false);
  files["progress.svg"] = plot.Render(progress, true);
  files["parallel.svg"] = ParallelSvg(v);
  files["importance.svg"] = ImportanceSvg(v, SweepImportance(v));
  return files;
}

}  // namespace trainq
