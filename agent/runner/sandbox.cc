#include "agent/runner/sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "core/clock.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

Status CheckSandboxMode(const std::string& mode, const std::string& what) {
  if (mode == "auto" || mode == "bwrap" || mode == "none") return {};
  return Fail(ErrorKind::kInvalidArgument,
              what + ": expected auto, bwrap or none, got \"" + mode + "\"");
}

namespace {

std::string FindBwrap() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    for (const auto& d : Split(path, ':')) {
      if (!d.empty()) dirs.emplace_back(d);
    }
  }
  dirs.push_back("/usr/bin");
  dirs.push_back("/bin");
  for (const auto& d : dirs) {
    std::string p = (fs::path(d) / "bwrap").string();
    if (access(p.c_str(), X_OK) == 0) return fs::absolute(p).string();
  }
  return "";
}

}  // namespace

Result<std::string> ResolveSandbox(const std::string& mode) {
  TRY(CheckSandboxMode(mode, "sandbox"));
  if (mode == "none") return std::string();
  std::string bwrap = FindBwrap();
  if (bwrap.empty() && mode == "bwrap") {
    return Fail(ErrorKind::kInvalidArgument,
                "sandbox: bwrap asked for, but no bwrap is installed (Debian: apt-get install "
                "bubblewrap; or sandbox: none to run without one)");
  }
  return bwrap;
}

std::string CanonicalPath(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::canonical(fs::absolute(path, ec), ec);
  return ec ? std::string() : p.string();
}

namespace {

// bwrap's own words: the first of its lines in what the probe printed.
std::string BwrapSaid(const std::string& output) {
  for (const auto& line : Split(output, '\n')) {
    if (line.starts_with("bwrap:")) return std::string(Trim(line));
  }
  std::string t(Trim(output));
  return t.empty() ? "no output" : t.substr(0, 300);
}

// One throwaway start of `true` with the flags a run gets; "" when it
// started, else what went wrong.
std::string TryStart(const std::string& bwrap, const SandboxConfig& config,
                     const std::string& scratch) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::path work = fs::path(scratch) / "work";
  fs::create_directories(work / "tmp", ec);
  if (ec) return "cannot make " + work.string() + ": " + ec.message();
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.cwd = work.string();
  spec.output_path = (fs::path(scratch) / "probe.log").string();
  spec.inherit_env = false;
  SandboxRun run;
  run.writable = {work.string()};
  run.tmp = (work / "tmp").string();
  WrapInSandbox(spec, bwrap, config, run);
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  if (!pid) return pid.error().message;
  // Waited through the Clock, as every loop of trainq's logic is.
  const Clock& clock = SystemClock::Get();
  const TimeMs deadline = clock.Now() + 30'000;
  std::optional<ExitStatus> st;
  while (!(st = runner.Poll(*pid))) {
    if (clock.Now() > deadline) {
      runner.KillGroup(*pid, SIGKILL);
      runner.Wait(*pid);
      return "bwrap did not finish `true` in 30 s";
    }
    clock.SleepFor(10);
  }
  std::string out = ReadFile(spec.output_path).value_or("");
  fs::remove_all(scratch, ec);
  if (st->ok()) return "";
  return BwrapSaid(out) + " (" + st->Describe() + ")";
}

}  // namespace

Result<SandboxState> ProbeSandbox(const std::string& mode, std::string& bwrap,
                                  SandboxConfig& config, const std::string& scratch_dir) {
  SandboxState s;
  if (bwrap.empty()) {
    s.note = mode == "none" ? "sandbox: none was asked for"
                            : "bwrap is not installed (Debian: bubblewrap)";
    return s;
  }
  config.own_proc = true;
  std::string full = TryStart(bwrap, config, scratch_dir);
  if (full.empty()) {
    s.form = "bwrap";
    return s;
  }
  if (mode == "bwrap") {
    return Fail(ErrorKind::kUnavailable,
                "sandbox: bwrap cannot start here: " + full +
                    "; set sandbox: auto to fall back to the strongest form that starts (see "
                    "docs/deployment.md#security), or allow user namespaces and /proc mounts");
  }
  config.own_proc = false;
  std::string hostproc = TryStart(bwrap, config, scratch_dir);
  if (hostproc.empty()) {
    s.form = "bwrap-hostproc";
    s.note = "bwrap cannot mount a fresh /proc here (" + full +
             "): runs see this machine's process list";
    return s;
  }
  config.own_proc = true;
  bwrap.clear();
  s.note = "bwrap cannot start here: " + hostproc;
  return s;
}

std::string SandboxHint(const std::string& log_text) {
  std::string_view t = log_text;
  if (t.size() > 16384) t = t.substr(t.size() - 16384);
  if (t.starts_with("bwrap:") || t.find("\nbwrap:") != std::string_view::npos) {
    return "the run's sandbox (bwrap) could not start it: this is trainq's sandbox, not the "
           "command; the worker's probe did not see it (set sandbox: none for this pool to run "
           "without one; docs/deployment.md#security)";
  }
  if (t.find("Read-only file system") != std::string_view::npos) {
    return "the run's sandbox makes everything read-only but its checkout, $TRAINQ_OUTPUT_DIR, "
           "/tmp and the cache directory ($XDG_CACHE_HOME); write there, or list the directory "
           "in the pool's sandbox_writable (docs/trainq-yaml.md#what-a-run-sees)";
  }
  size_t at = t.find("/tmp/");
  if (at != std::string_view::npos &&
      (t.find("No such file or directory") != std::string_view::npos ||
       t.find("not found") != std::string_view::npos)) {
    return "the run's sandbox gives it a /tmp of its own: files in this machine's /tmp are not "
           "visible to runs (put data elsewhere, docs/trainq-yaml.md#what-a-run-sees)";
  }
  return "";
}

std::map<std::string, std::string> CacheEnvironment(const std::string& cache_dir) {
  const fs::path c(cache_dir);
  return {
      {"XDG_CACHE_HOME", c.string()},
      {"HF_HOME", (c / "huggingface").string()},
      {"TORCH_HOME", (c / "torch").string()},
      {"SCIKIT_LEARN_DATA", (c / "scikit_learn_data").string()},
      {"MPLCONFIGDIR", (c / "matplotlib").string()},
      {"WANDB_CACHE_DIR", (c / "wandb").string()},
      {"WANDB_CONFIG_DIR", (c / "wandb-config").string()},
      {"WANDB_DATA_DIR", (c / "wandb-data").string()},
  };
}

void WrapInSandbox(ProcessSpec& spec, const std::string& bwrap, const SandboxConfig& config,
                   const SandboxRun& run) {
  std::vector<std::string> a = {bwrap,           "--die-with-parent", "--unshare-user",
                                "--unshare-pid", "--unshare-uts",     "--unshare-cgroup-try"};
  if (!run.share_ipc) a.push_back("--unshare-ipc");
  a.insert(a.end(), {"--ro-bind", "/", "/", "--dev", "/dev"});
  // Accelerators stay usable: their device nodes, as they are.
  std::error_code ec;
  std::vector<std::string> devices;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with("nvidia") || name == "dri" || name == "infiniband" || name == "kfd") {
      devices.push_back(e.path().string());
    }
  }
  std::sort(devices.begin(), devices.end());
  for (const auto& d : devices) a.insert(a.end(), {"--dev-bind", d, d});
  if (run.share_ipc && fs::is_directory("/dev/shm", ec)) {
    a.insert(a.end(), {"--bind", "/dev/shm", "/dev/shm"});
  }
  // A fresh /proc for the run's pid namespace; the hostproc form keeps the
  // machine's (bound read-only with /) where a container forbids the mount.
  if (config.own_proc) a.insert(a.end(), {"--proc", "/proc"});
  if (run.tmp.empty()) {
    a.insert(a.end(), {"--tmpfs", "/tmp"});
  } else {
    a.insert(a.end(), {"--bind", CanonicalPath(run.tmp), "/tmp"});
  }
  spec.env["TMPDIR"] = "/tmp";
  // Every path by its canonical name: bwrap follows no symlink it is asked to
  // make a mount point at (/var/run/secrets/... on Debian is /run/secrets/...).
  auto bind_dirs = [&](const std::vector<std::string>& dirs, const char* how) {
    for (const auto& w : dirs) {
      std::string p = CanonicalPath(w);
      if (p.empty() || !fs::is_directory(p, ec)) continue;
      a.insert(a.end(), {how, p, p});
    }
  };
  // The operator's writable directories, and what runs need of trainq, first:
  // what is hidden stays hidden inside them.
  bind_dirs(config.writable, "--bind");
  bind_dirs(config.readable, "--ro-bind");
  // Hidden: a directory becomes an empty tmpfs, a file /dev/null. A path that
  // does not exist now needs nothing (the rest is read-only: it cannot appear
  // inside).
  for (const auto& h : config.hide) {
    std::string p = CanonicalPath(h);
    if (p.empty() || p == "/") continue;
    auto st = fs::status(p, ec);
    if (ec) continue;
    if (fs::is_directory(st)) {
      a.insert(a.end(), {"--tmpfs", p});
    } else if (fs::exists(st)) {
      a.insert(a.end(), {"--ro-bind", "/dev/null", p});
    }
  }
  // The run's own directories, over whatever the hidden paths covered (bwrap
  // makes the mount points it needs inside a hidden directory's tmpfs).
  bind_dirs(run.writable, "--bind");
  bind_dirs(run.readable, "--ro-bind");
  if (!spec.cwd.empty()) {
    std::string cwd = CanonicalPath(spec.cwd);
    a.insert(a.end(), {"--chdir", cwd.empty() ? fs::absolute(spec.cwd, ec).string() : cwd});
  }
  a.push_back("--");
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  spec.argv = std::move(a);
}

}  // namespace trainq
