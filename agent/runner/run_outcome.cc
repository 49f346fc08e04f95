#include "agent/runner/run_outcome.h"

#include <cmath>
#include <set>
#include <vector>

#include "core/strings.h"

namespace trainq {

namespace {

bool IsConfigError(const RunEnd& end, std::string_view tail) {
  if (end.timed_out || end.status.signal != 0) return false;
  int code = end.status.code;
  if (code == 126 || code == 127) return true;  // the shell cannot find or run the command
  const bool trainer = std::string_view(end.command).starts_with("trainq-train ");
  if (trainer && (code == 2 || code == 3)) return true;  // bad spec or usage; data error
  // python3 missing.py: "python3: can't open file '...': [Errno 2] No such file or directory"
  if (code == 2 && tail.find("can't open file") != std::string_view::npos) return true;
  return false;
}

}  // namespace

std::string MeaningfulTail(std::string_view log, int max_lines, std::size_t max_chars) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < log.size();) {
    std::size_t nl = log.find('\n', start);
    std::string_view line = log.substr(start, nl == std::string_view::npos ? log.npos : nl - start);
    start = nl == std::string_view::npos ? log.size() : nl + 1;
    if (auto cr = line.rfind('\r'); cr != std::string_view::npos) {
      // A progress bar redrawn in place: the last drawing (or the one before
      // a trailing '\r').
      std::string_view last = Trim(line.substr(cr + 1));
      if (last.empty()) {
        std::string_view before = line.substr(0, cr);
        auto cr2 = before.rfind('\r');
        last = cr2 == std::string_view::npos ? before : before.substr(cr2 + 1);
      }
      line = last;
    }
    line = Trim(line);
    if (line.empty() || line.starts_with("=== trainq:")) continue;
    lines.push_back(line);
  }
  std::size_t from = lines.size() > static_cast<std::size_t>(max_lines)
                         ? lines.size() - static_cast<std::size_t>(max_lines)
                         : 0;
  std::string out;
  for (std::size_t i = from; i < lines.size(); ++i) {
    out += (out.empty() ? "" : " | ") + std::string(lines[i]);
  }
  if (out.size() > max_chars) out = "..." + out.substr(out.size() - max_chars);
  return out;
}

RunOutcome JudgeRun(const RunEnd& end, const MetricReading& reading) {
  RunOutcome o;
  std::string what;
  if (end.timed_out) {
    what = "timed out after " + FormatDuration(end.timeout_s * 1000) + " (process group killed)";
  } else if (!end.status.ok()) {
    what = end.status.Describe();
  } else if (!reading.value) {
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const auto& p : reading.points) {
      if (seen.insert(p.name).second) names.push_back(p.name);
    }
    std::string found;
    if (names.empty()) {
      found = "nothing in $TRAINQ_METRICS_FILE";
    } else {
      found = "$TRAINQ_METRICS_FILE holds ";
      for (std::size_t i = 0; i < names.size() && i < 10; ++i) {
        found += (i ? ", '" : "'") + names[i] + "'";
      }
      if (names.size() > 10) found += " and " + std::to_string(names.size() - 10) + " more";
      found += "; set metric.name in trainq.yaml to one of them";
    }
    what = "exited 0 but reported no '" + end.metric_name + "' metric (" + found +
           (end.regex_tried ? "; no match of metric.regex in its output" : "") + ")";
  } else if (!std::isfinite(*reading.value)) {
    what = "metric '" + end.metric_name + "' is " + FormatDouble(*reading.value, 4) +
           "; the run is invalid";
  } else {
    o.succeeded = true;
    return o;
  }
  std::string tail = MeaningfulTail(end.log);
  o.config_error = IsConfigError(end, tail);
  o.error = what + (o.config_error ? " (configuration error, not retried)" : "") +
            (tail.empty() ? "" : ": " + tail);
  return o;
}

}  // namespace trainq
