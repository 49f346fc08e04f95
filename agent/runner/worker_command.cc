// `trainq worker`: its flags and token file, checked, and the Worker over
// HTTP they build (agent/runner/worker.h's WorkerCommandOptions).
#include "agent/runner/worker.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/repo/git_repo.h"
#include "agent/runner/gang.h"
#include "agent/runner/run_process.h"
#include "core/http_client.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

Result<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "--token-file (or TRAINQ_TOKEN_FILE) is required");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Fail(ErrorKind::kNotFound, "token file " + path + ": " + std::strerror(errno));
  }
  auto text = ReadFile(path);
  if (!text) return Fail(ErrorKind::kIo, "token file " + path + ": " + text.error().message);
  std::string token(Trim(*text));
  if (token.empty()) return Fail(ErrorKind::kInvalidArgument, "token file " + path + " is empty");
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return Fail(ErrorKind::kInvalidArgument,
                "token file " + path + " holds more than one word (expected the pool token only)");
  }
  // Group-readable is how a Kubernetes Secret reaches a non-root worker
  // (the pod's fsGroup: mode 0440); readable by anyone is a mistake.
  if (st.st_mode & S_IRWXO) {
    spdlog::warn("token file {} is readable by other users (mode {:o}); chmod 600 it", path,
                 st.st_mode & 0777);
  }
  return token;
}

Result<int> CmdWorker(const WorkerCommandOptions& o, const Clock& clock,
                      const std::atomic<bool>& stop) {
  // Not dumpable: its environment and token stay away from processes of the
  // same user (a run without a sandbox included).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (o.server.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "--server (or TRAINQ_SERVER) is required");
  }
  if (o.slots < 1) return Fail(ErrorKind::kInvalidArgument, "--slots must be at least 1");
  if (o.runs_per_gpu < 0) {
    return Fail(ErrorKind::kInvalidArgument, "--runs-per-gpu must be at least 1 (0: the pool's)");
  }
  if (o.fuse_max < 1) return Fail(ErrorKind::kInvalidArgument, "--fuse-max must be at least 1");
  WorkerConfig c;
  c.server = o.server;
  while (c.server.ends_with('/')) c.server.pop_back();
  ASSIGN_OR_RETURN(c.token, ReadTokenFile(o.token_file));
  c.machine = o.machine;
  c.slots = o.slots;
  ASSIGN_OR_RETURN(c.gpus, ResolveGpus(o.gpus));
  c.runs_per_gpu = o.runs_per_gpu;
  c.fuse_max = o.fuse_max;
  c.once = o.once;
  if (o.source != "auto" && o.source != "server") {
    return Fail(ErrorKind::kInvalidArgument,
                "--source: expected auto or server, got \"" + o.source + "\"");
  }
  c.source = o.source;
  if (o.orphan_timeout_s < 1) {
    return Fail(ErrorKind::kInvalidArgument, "--orphan-timeout must be at least 1 second");
  }
  c.orphan_timeout_ms = static_cast<TimeMs>(o.orphan_timeout_s) * 1000;
  c.self_stop = o.self_stop;
  if (o.self_stop_timeout_s < 1) {
    return Fail(ErrorKind::kInvalidArgument, "--self-stop-timeout must be at least 1 second");
  }
  c.self_stop_timeout_ms = static_cast<TimeMs>(o.self_stop_timeout_s) * 1000;
  c.env_passthrough = o.env_passthrough;
  c.kill_grace_ms = o.kill_grace_s * 1000;
  c.data_dir = fs::absolute(o.data_dir.empty() ? "trainq-worker" : o.data_dir).string();
  std::error_code ec;
  fs::create_directories(c.data_dir, ec);
  if (ec) return Fail(ErrorKind::kIo, "--data-dir " + c.data_dir + ": " + ec.message());
  TRY(CheckSandboxMode(o.sandbox, "--sandbox"));
  ASSIGN_OR_RETURN(c.bwrap, ResolveSandbox(o.sandbox));
  c.sandbox.mode = o.sandbox;
  // Runs never see this worker's files (other runs, the outbox) nor its token.
  c.sandbox.hide = {c.data_dir, fs::absolute(o.token_file).string()};
  for (const auto& h : o.sandbox_hide) c.sandbox.hide.push_back(fs::absolute(h).string());
  for (const auto& w : o.sandbox_writable) c.sandbox.writable.push_back(fs::absolute(w).string());
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) c.bin_dir = self.parent_path().string();
  const std::string trainer = FindTrainqTrain(c.bin_dir, PathEnv());
  if (trainer.empty()) {
    spdlog::warn("trainq-train is neither beside this trainq ({}) nor on PATH: `trainer:` runs "
                 "will fail here (install it, and libtorch, on each worker)",
                 c.bin_dir.empty() ? "?" : c.bin_dir);
  }
  // What runs need of trainq stays visible wherever it is installed (a build
  // under /tmp, which the sandbox replaces with the run's own).
  if (!c.bin_dir.empty()) c.sandbox.readable.push_back(c.bin_dir);
  if (!trainer.empty()) c.sandbox.readable.push_back(fs::path(trainer).parent_path().string());
  // Caches persist across this machine's runs (HOME is read-only inside).
  c.cache_dir = (fs::path(c.data_dir) / "cache").string();
  fs::create_directories(c.cache_dir, ec);
  for (const auto& h : c.sandbox.hide) {
    if (CanonicalPath(h).empty() && !fs::exists(fs::path(h).parent_path(), ec)) {
      spdlog::warn("sandbox: cannot hide {}: its folder does not exist (nothing to hide)", h);
    }
  }
  ASSIGN_OR_RETURN(auto state, ProbeSandbox(o.sandbox, c.bwrap, c.sandbox,
                                            (fs::path(c.data_dir) / "sandbox-probe").string()));
  c.sandbox_form = state.form;
  c.sandbox_note = state.note;
  if (c.bwrap.empty()) {
    spdlog::warn(
        "runs start without a sandbox ({}): a run can read what this worker's user "
        "can read, its token file included",
        state.note);
  } else {
    spdlog::info(
        "runs start in a bwrap sandbox ({}, form {}{}); writable: their checkout, run "
        "directory, /tmp and {}{}",
        c.bwrap, state.form, state.note.empty() ? "" : ": " + state.note, c.cache_dir,
        c.sandbox.writable.empty()
            ? ""
            : " and " + fmt::format("{}", fmt::join(c.sandbox.writable, ", ")));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  c.hostname = host;
  c.pid = static_cast<int>(::getpid());
  c.cpus = static_cast<int>(std::thread::hardware_concurrency());
  c.memory_mb = DetectMemoryMb();
  spdlog::info("worker for {}: {} slot(s), {} GPU(s){}, {} CPU(s), {} MiB; files in {}",
               UrlForLog(c.server), c.slots, c.gpus.size(),
               c.gpus.empty() ? "" : fmt::format(" x {} run(s) each", c.runs_per_gpu), c.cpus,
               c.memory_mb, c.data_dir);
  ::signal(SIGPIPE, SIG_IGN);
  CurlHttpClient http;
  PosixProcessRunner runner;
  Worker worker(http, runner, clock, std::move(c));
  return worker.Run(stop);
}

}  // namespace trainq
