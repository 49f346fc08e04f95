#include "agent/results/sweep_plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
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

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
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
         Escape(title_) + "</text>\n";
    // Axes and ticks.
    s += "<g stroke=\"#444\" fill=\"none\"><rect x=\"" + Px(kLeft) + "\" y=\"" + Px(kTop) +
         "\" width=\"" + Px(kW - kLeft - kRight) + "\" height=\"" + Px(kH - kTop - kBottom) +
         "\"/></g>\n";
    for (int i = 0; i <= 4; ++i) {
      double y = y0 + (y1 - y0) * i / 4;
      s += "<text x=\"" + Px(kLeft - 6) + "\" y=\"" + Px(sy(y) + 4) +
           "\" text-anchor=\"end\">" + Num(y) + "</text>\n";
    }
    if (!categories_.empty()) {
      for (std::size_t i = 0; i < categories_.size(); ++i) {
        s += "<text x=\"" + Px(sx(static_cast<double>(i))) + "\" y=\"" + Px(kH - kBottom + 16) +
             "\" text-anchor=\"middle\">" + Escape(categories_[i]) + "</text>\n";
      }
    } else {
      for (int i = 0; i <= 4; ++i) {
        double xu = x0 + (x1 - x0) * i / 4;
        double xv = log_x_ ? std::exp(xu) : xu;
        double px = kLeft + (xu - x0) / (x1 - x0) * (kW - kLeft - kRight);
        s += "<text x=\"" + Px(px) + "\" y=\"" + Px(kH - kBottom + 16) +
             "\" text-anchor=\"middle\">" + Num(xv) + "</text>\n";
      }
    }
    s += "<text x=\"" + Px(kW / 2) + "\" y=\"" + Px(kH - 15) + "\" text-anchor=\"middle\">" +
         Escape(xlabel_) + (log_x_ ? " (log scale)" : "") + "</text>\n";
    s += "<text x=\"15\" y=\"" + Px(kH / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 15 " +
         Px(kH / 2) + ")\">" + Escape(ylabel_) + "</text>\n";
    if (line && marks.size() > 1) {
      s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
      for (const auto& m : marks) s += Px(sx(m.x)) + "," + Px(sy(m.y)) + " ";
      s += "\"/>\n";
    }
    s += "<g class=\"points\">\n";
    for (const auto& m : marks) {
      s += "<g><title>" + Escape(m.title) + "</title>";
      if (m.lo && m.hi) {
        s += "<line x1=\"" + Px(sx(m.x)) + "\" x2=\"" + Px(sx(m.x)) + "\" y1=\"" + Px(sy(*m.lo)) +
             "\" y2=\"" + Px(sy(*m.hi)) + "\" stroke=\"#1f77b4\"/>";
      }
      s += "<circle class=\"point\" cx=\"" + Px(sx(m.x)) + "\" cy=\"" + Px(sy(m.y)) +
           "\" r=\"3.5\" fill=\"#1f77b4\"/></g>\n";
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

}  // namespace

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
  return files;
}

}  // namespace trainq
