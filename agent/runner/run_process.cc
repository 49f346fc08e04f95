#include "agent/runner/run_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <vector>

#include "agent/repo/git_repo.h"
#include "agent/repo/mirror.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

// A line of `tail` (lines joined by " | ") that starts with "usage:" or
// "Usage:", as argparse and click print before exiting 2.
bool ShowsUsage(std::string_view tail) {
  for (std::string_view word : {"usage:", "Usage:"}) {
    for (auto at = tail.find(word); at != std::string_view::npos; at = tail.find(word, at + 1)) {
      if (at == 0 || tail.substr(0, at).ends_with(" | ")) return true;
    }
  }
  return false;
}

bool IsConfigError(const RunEnd& end, std::string_view tail) {
  if (end.timed_out || end.status.signal != 0) return false;
  int code = end.status.code;
  if (code == 126 || code == 127) return true;  // the shell cannot find or run the command
  const bool trainer = std::string_view(end.command).starts_with("trainq-train ");
  if (trainer && (code == 2 || code == 3)) return true;  // bad spec or usage; data error
  // python3 missing.py: "python3: can't open file '...': [Errno 2] No such file or directory"
  if (code == 2 && tail.find("can't open file") != std::string_view::npos) return true;
  // A usage error (argparse, click, getopt-style scripts: exit 2 after a
  // "usage:" line): the same arguments are refused again on every attempt.
  if (code == 2 && ShowsUsage(tail)) return true;
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

RunPaths RunPathsFor(const std::string& data_dir, std::int64_t run_id,
                     const std::string& log_name) {
  const fs::path dir = fs::path(data_dir) / "runs" / std::to_string(run_id);
  RunPaths p;
  p.dir = dir.string();
  p.log = (dir / log_name).string();
  p.work = (dir / "work").string();
  p.metrics = (dir / "work" / "metrics.jsonl").string();
  p.output_dir = (dir / "work" / "output").string();
  return p;
}

Status PrepareRunWork(const RunPaths& paths) {
  std::error_code ec;
  fs::create_directories(paths.dir, ec);
  if (ec) return Fail(ErrorKind::kIo, paths.dir + ": " + ec.message());
  // remove_all unlinks symlinks, it never follows them.
  fs::remove_all(paths.work, ec);
  if (ec) return Fail(ErrorKind::kIo, "cannot clear " + paths.work + ": " + ec.message());
  fs::create_directories(paths.output_dir, ec);
  if (ec) return Fail(ErrorKind::kIo, paths.output_dir + ": " + ec.message());
  int fd =
      ::open(paths.metrics.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(ErrorKind::kIo, paths.metrics + ": " + std::strerror(errno));
  ::close(fd);
  return {};
}

Status ResetWorkerFile(const std::string& path, const std::string& text) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Fail(ErrorKind::kIo, path + ": " + std::strerror(errno));
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(ErrorKind::kIo, path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      return Fail(ErrorKind::kIo, path + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return {};
}

std::string ReadRunFile(const std::string& path, std::int64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.resize(
        static_cast<size_t>(std::min<std::int64_t>(std::max<off_t>(st.st_size, 0), max_bytes)));
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);
  }
  ::close(fd);
  return out;
}

ProcessSpec BuildRunProcess(const LeasedRun& run, const RunPaths& paths, const std::string& bin_dir,
                            const std::string& cuda_devices,
                            const std::vector<std::string>& env_passthrough) {
  std::map<std::string, std::string> vars = {
      {"seed", std::to_string(run.seed)},
      {"repeat", std::to_string(run.repeat)},
      {"run_id", std::to_string(run.run_id)},
      {"output_dir", ShellQuote(paths.output_dir)},
  };
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", Substitute(run.command, vars)};
  spec.cwd = paths.workdir;
  spec.output_path = paths.log;
  spec.inherit_env = false;
  spec.pass_env = run.env_passthrough ? IntersectEnvPatterns(env_passthrough, *run.env_passthrough)
                                      : env_passthrough;
  spec.env = {
      {"TRAINQ_SEED", std::to_string(run.seed)},
      {"TRAINQ_REPEAT", std::to_string(run.repeat)},
      {"TRAINQ_RUN_ID", std::to_string(run.run_id)},
      {"TRAINQ_BATCH_ID", std::to_string(run.batch_id)},
      {"TRAINQ_ATTEMPT", std::to_string(run.attempt)},
      {"TRAINQ_EXPERIMENT", run.experiment},
      {"TRAINQ_COMMIT", run.sha},
      {"TRAINQ_METRIC", run.metric_name},
      {"TRAINQ_METRICS_FILE", paths.metrics},
      {"TRAINQ_OUTPUT_DIR", paths.output_dir},
      // Python scripts: deterministic hashing and unbuffered output in the log.
      {"PYTHONHASHSEED", std::to_string(run.seed)},
      {"PYTHONUNBUFFERED", "1"},
  };
  if (!cuda_devices.empty() || run.gpus == 0) {
    // A run that asked for no GPU sees none, so it cannot take one by accident.
    spec.env["CUDA_VISIBLE_DEVICES"] = cuda_devices;
  }
  if (!bin_dir.empty()) {
    const char* path = std::getenv("PATH");
    spec.env["PATH"] = bin_dir + ":" + (path ? path : "/usr/bin:/bin");
  }
  return spec;
}

std::string FindTrainqTrain(const std::string& bin_dir, std::string_view path) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (!bin_dir.empty() && executable(fs::path(bin_dir) / "trainq-train")) {
    return (fs::path(bin_dir) / "trainq-train").string();
  }
  for (const auto& dir : Split(path, ':')) {
    if (dir.empty()) continue;  // the current folder: not where a worker's run starts
    fs::path candidate = fs::path(dir) / "trainq-train";
    if (executable(candidate)) return candidate.string();
  }
  return "";
}

std::string PathEnv() {
  const char* p = std::getenv("PATH");
  return p ? p : "";
}

std::string SelfDir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

MetricReading ReadRunMetric(const std::string& metrics_text, const std::string& log_text,
                            const std::string& name, const std::string& regex) {
  MetricReading r;
  std::optional<double> last, last_final;
  int line_no = 0;
  for (const auto& raw : Split(metrics_text, '\n')) {
    ++line_no;
    auto line = Trim(raw);
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.contains("value") ||
        !j["name"].is_string() || !(j["value"].is_number() || j["value"].is_null())) {
      r.warnings.push_back("metrics file line " + std::to_string(line_no) +
                           ": expected {\"name\": ..., \"value\": <number>}");
      continue;
    }
    MetricPoint p;
    p.name = j["name"].get<std::string>();
    // JSON has no NaN: a null value stands for one.
    p.value = j["value"].is_null() ? std::nan("") : j["value"].get<double>();
    if (j.contains("step") && j["step"].is_number_integer()) p.step = j["step"].get<std::int64_t>();
    // "final": true (or 1) marks the value that counts; anything else does not.
    if (j.contains("final")) {
      const auto& f = j["final"];
      p.final = (f.is_boolean() && f.get<bool>()) || (f.is_number() && f.get<double>() != 0);
      if (!f.is_boolean() && !f.is_number()) {
        r.warnings.push_back("metrics file line " + std::to_string(line_no) +
                             ": \"final\" should be true or false");
      }
    }
    if (p.name == name) {
      last = p.value;
      if (p.final) last_final = p.value;
    }
    r.points.push_back(std::move(p));
  }
  r.value = last_final ? last_final : last;
  if (!r.value && !regex.empty()) {
    try {
      std::regex re(regex);
      std::optional<std::string> match;
      for (auto it = std::sregex_iterator(log_text.begin(), log_text.end(), re);
           it != std::sregex_iterator(); ++it) {
        if (it->size() > 1) match = (*it)[1].str();
      }
      if (match) {
        char* end = nullptr;
        double v = std::strtod(match->c_str(), &end);
        if (end && *end == '\0' && !match->empty()) {
          r.value = v;
          r.points.push_back(MetricPoint{name, v, std::nullopt, true});
        } else {
          r.warnings.push_back("metric regex matched \"" + *match + "\", which is not a number");
        }
      }
    } catch (const std::regex_error& e) {
      r.warnings.push_back(std::string("invalid metric regex: ") + e.what());
    }
  }
  return r;
}

std::string RunBanner(const LeasedRun& run, const std::string& where, TimeMs now) {
  return "=== trainq: run " + std::to_string(run.run_id) + " (" + run.experiment + ", seed " +
         std::to_string(run.seed) + ", attempt " + std::to_string(run.attempt) + ")" +
         (where.empty() ? "" : " on " + where) + " at " + FormatTimestamp(now) + " UTC ===\n";
}

std::string PassthroughNote(const LeasedRun& run, const std::vector<std::string>& allowed) {
  if (!run.env_passthrough) return "";
  std::vector<std::string> refused;
  for (const auto& p : *run.env_passthrough) {
    if (IntersectEnvPatterns(allowed, {p}).empty()) refused.push_back(p);
  }
  if (refused.empty()) return "";
  std::string names;
  for (const auto& r : refused) names += (names.empty() ? "" : ", ") + r;
  return "=== trainq: env_passthrough: " + names +
         " not passed: the pool's env_passthrough (server.yaml or --env-passthrough) does not "
         "allow " + (refused.size() == 1 ? "it" : "them") + " ===\n";
}

Attempt JudgeAttempt(const LeasedRun& run, const ExitStatus& status, bool timed_out,
                     std::string_view log, const std::string& metrics_text, bool fused) {
  Attempt a;
  a.reading = ReadRunMetric(metrics_text, fused ? "" : std::string(log), run.metric_name,
                            fused ? "" : run.metric_regex);
  RunEnd end;
  end.status = status;
  end.timed_out = timed_out;
  end.timeout_s = run.timeout_s;
  end.command = run.command;
  end.metric_name = run.metric_name;
  end.regex_tried = !run.metric_regex.empty() && !fused;
  end.log = log;
  a.outcome = JudgeRun(end, a.reading);
  return a;
}

void StopGently(ProcessRunner& runner, int pid, std::optional<TimeMs>& kill_sent_ms, TimeMs now,
                TimeMs grace_ms) {
  if (!kill_sent_ms) {
    runner.KillGroup(pid, SIGTERM);
    kill_sent_ms = now;
  } else if (now - *kill_sent_ms >= grace_ms) {
    runner.KillGroup(pid, SIGKILL);
  }
}

Result<std::string> CachedWorktree(const std::string& data_dir, const std::string& repo_url,
                                   const std::string& sha, const std::string& tmp_tag) {
  fs::path dir = fs::path(data_dir) / "worktrees" / sha;
  fs::path done = dir / ".trainq-checkout-complete";
  std::error_code ec;
  if (fs::exists(done, ec)) return dir.string();
  // A URL (not a directory here): check out of a local mirror, fetched when
  // it lacks the commit.
  std::string repo_dir = repo_url;
  if (repo_url.find("://") != std::string::npos && !fs::is_directory(repo_url, ec)) {
    ASSIGN_OR_RETURN(auto mirror, Mirror::Open(Mirror::PathFor(data_dir, repo_url), repo_url));
    if (!mirror.HasCommit(sha)) TRY(mirror.Fetch(FetchAuth{}));
    repo_dir = mirror.path();
  }
  // Check out into a fresh temporary directory, then rename: a crash half-way
  // never leaves a partial tree that a later run would trust.
  fs::path tmp = fs::path(data_dir) / "worktrees" / (sha + ".tmp-" + tmp_tag);
  fs::remove_all(tmp, ec);
  ASSIGN_OR_RETURN(auto repo, GitRepo::Open(repo_dir));
  TRY(repo.CheckoutTo(sha, tmp.string()));
  TRY(WriteFile((tmp / ".trainq-checkout-complete").string(), sha + "\n"));
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) return Fail(ErrorKind::kIo, "cannot move checkout into " + dir.string() + ": " +
                                          ec.message());
  return dir.string();
}

}  // namespace trainq
