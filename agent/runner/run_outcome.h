// How one attempt of a run ended, decided in one place for the in-process
// executor (agent/runner/executor.cc) and the fleet worker (agent/runner/worker.cc).
//
// A failure is either worth another attempt (a crash, a timeout, a missing
// metric) or a configuration error that fails the same way every time and is
// not retried: trainq-train's exit 2 (bad spec or usage) and 3 (data error:
// a missing or malformed data file), a command the shell cannot find or run
// (126, 127), and Python's "can't open file" (exit 2).
//
// The message says what went wrong first, then the last meaningful lines of
// the run's own output (trainq's `=== trainq:` banner lines skipped), so that
// a table cut at 80 characters still shows the cause:
//   exit code 2 (configuration error, not retried): trainq-train: bad spec: ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "agent/runner/executor.h"
#include "core/process.h"

namespace trainq {

struct RunEnd {
  ExitStatus status;
  bool timed_out = false;
  std::int64_t timeout_s = 0;
  std::string command;      // as run: "trainq-train ..." marks a trainer run
  std::string metric_name;
  bool regex_tried = false;  // metric.regex was applied to the output
  std::string_view log;      // this attempt's output
};

struct RunOutcome {
  bool succeeded = false;
  bool config_error = false;  // the same attempt would fail again: not retried
  std::string error;          // "" when succeeded; the full message for the store
};

RunOutcome JudgeRun(const RunEnd& end, const MetricReading& reading);

// The last `max_lines` non-empty lines of `log` that are not trainq's own
// banner lines, joined by " | " (at most `max_chars`, cut at the front).
// For a progress bar redrawn with '\r', the last drawing counts.
std::string MeaningfulTail(std::string_view log, int max_lines = 5, std::size_t max_chars = 600);

}  // namespace trainq
