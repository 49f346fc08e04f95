// A leased run as a process, and how its attempt ended: where the one run
// engine (agent/runner/worker.h; its main runs and its gang members alike)
// builds the process, reads the metric, judges the outcome and stops a
// process.
//
// A failure is either worth another attempt (a crash, a timeout, a missing
// metric) or a configuration error that fails the same way every time and is
// not retried: trainq-train's exit 2 (bad spec or usage) and 3 (data error:
// a missing or malformed data file), a command the shell cannot find or run
// (126, 127), Python's "can't open file" (exit 2), and a script's usage error
// (exit 2 with a line starting "usage:" or "Usage:" in its last lines, as
// argparse and click print).
//
// The message says what went wrong first, then the last meaningful lines of
// the run's own output (trainq's `=== trainq:` banner lines skipped), so that
// a table cut at 80 characters still shows the cause:
//   exit code 2 (configuration error, not retried): trainq-train: bad spec: ...
#pragma once

#include <cstdint>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/process.h"
#include "core/result.h"
#include "queue/types.h"

namespace trainq {

// Where a run's files go.
// `dir` is the worker's own: a run never writes there, so the worker opens
// its files by name. `work` is the only tree a run writes (the sandbox binds
// it), made fresh for each attempt (PrepareRunWork): the worker reads what the
// run left there only through ReadRunFile (no symlink followed, regular files
// only), and never writes there once the run has started.
struct RunPaths {
  std::string dir;         // <data>/runs/<id>: the worker's
  std::string log;         // <dir>/output.log (this attempt's output)
  std::string work;        // <dir>/work: the run's, fresh per attempt
  std::string metrics;     // <work>/metrics.jsonl
  std::string output_dir;  // <work>/output
  std::string workdir;     // checkout of the commit (<work>/checkout)
};

// The paths of run `run_id` under a worker's data dir.
RunPaths RunPathsFor(const std::string& data_dir, std::int64_t run_id,
                     const std::string& log_name = "output.log");

// Makes `paths.work` fresh for an attempt: whatever an earlier attempt left
// there (symlinks, FIFOs) removed without being followed, then the output
// dir and an empty metrics file made anew (O_EXCL, O_NOFOLLOW).
Status PrepareRunWork(const RunPaths& paths);

// A file of the worker's own (a run's log) made anew holding `text`: whatever
// is at `path` is unlinked first (a symlink is removed, never followed) and
// the file created with O_EXCL | O_NOFOLLOW.
Status ResetWorkerFile(const std::string& path, const std::string& text);

// What a run left in its work tree, read by the worker: the file at `path`
// opened without following a symlink and without blocking (a FIFO), only when
// it is a regular file, at most `max_bytes` from its start. "" when it is
// missing or not a regular file.
std::string ReadRunFile(const std::string& path, std::int64_t max_bytes = std::int64_t{256} << 20);

// The process a run becomes: /bin/sh -c COMMAND with the run environment:
// the TRAINQ_* run variables over RunEnvironment(env_passthrough) (a safe
// base plus the variables the operator chose), never the whole of ours.
// `env_passthrough` is the operator's (the pool's, serve's or the worker's
// flag); a run whose trainq.yaml has `env_passthrough:` gets only what both
// allow (IntersectEnvPatterns): the repository narrows, never widens.
ProcessSpec BuildRunProcess(const LeasedRun& run, const RunPaths& paths,
                            const std::string& bin_dir, const std::string& cuda_devices,
                            const std::vector<std::string>& env_passthrough = {});

// The `trainq-train` a trainer run's shell finds: the one beside the running
// trainq (`bin_dir`, which BuildRunProcess puts first on PATH), else the first
// executable one on `path` (a PATH value). "" when there is none.
std::string FindTrainqTrain(const std::string& bin_dir, std::string_view path);

// $PATH ("" when unset).
std::string PathEnv();

// The folder of the running executable ("" when /proc/self/exe is unreadable).
std::string SelfDir();

// The run's final metric: the last `name` point of the metrics file (one tagged
// final wins over untagged ones), else the last match of `regex`'s first group
// in `log_text`. Also returns every parsed point for the store.
struct MetricReading {
  std::optional<double> value;
  std::vector<MetricPoint> points;
  std::vector<std::string> warnings;  // malformed lines, with their line numbers
};
MetricReading ReadRunMetric(const std::string& metrics_text, const std::string& log_text,
                            const std::string& name, const std::string& regex);

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

// The first line of an attempt's log:
// "=== trainq: run 7 (exp, seed 3, attempt 1) on host at 2026-11-24 12:00:00 UTC ===".
std::string RunBanner(const LeasedRun& run, const std::string& where, TimeMs now);

// "=== trainq: ... ===" naming what the run's trainq.yaml env_passthrough
// asked for that `allowed` (the operator's env_passthrough) does not let
// through, so the run's log says why a variable is missing; "" when nothing.
// Names only, never values.
std::string PassthroughNote(const LeasedRun& run, const std::vector<std::string>& allowed);

// Reads what the attempt measured and judges it: the metric from the metrics
// file (or `regex` over the log), then JudgeRun. `fused`: one process ran
// several seeds, so its log is shared and only the metrics files count.
struct Attempt {
  MetricReading reading;
  RunOutcome outcome;
};
Attempt JudgeAttempt(const LeasedRun& run, const ExitStatus& status, bool timed_out,
                     std::string_view log, const std::string& metrics_text, bool fused = false);

// Stops a run's process group gently: SIGTERM the first time, SIGKILL once
// `grace_ms` has passed since (`kill_sent_ms` remembers when).
void StopGently(ProcessRunner& runner, int pid, std::optional<TimeMs>& kill_sent_ms, TimeMs now,
                TimeMs grace_ms);

// The tree of commit `sha` under <data_dir>/worktrees/<sha>, checked out once
// and reused (a marker file tells a complete checkout from a crashed one).
// repo_url is a local repository (a path), or a URL (http(s), file://, ssh)
// fetched first into a mirror under <data_dir>/mirrors: a worker on another
// machine. `tmp_tag` makes the temporary checkout directory unique.
Result<std::string> CachedWorktree(const std::string& data_dir, const std::string& repo_url,
                                   const std::string& sha, const std::string& tmp_tag);

}  // namespace trainq
