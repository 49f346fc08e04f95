#include "cloud/run_capture.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/strings.h"

namespace trainq::cloud {

namespace {

struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

Result<std::string> MakeTemp(const std::string& dir, const char* what, TempFile& holder) {
  std::string pattern = (dir.empty() ? std::string("/tmp") : dir) + "/trainq-" + what + "-XXXXXX";
  int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    return Fail(ErrorKind::kIo, "cannot create a capture file in " + (dir.empty() ? "/tmp" : dir) +
                                    ": " + std::strerror(errno));
  }
  ::close(fd);
  holder.path = pattern;
  return pattern;
}

}  // namespace

std::string Tail(const std::string& s, size_t max) {
  std::string t(Trim(s));
  if (t.size() > max) t = "..." + t.substr(t.size() - max);
  return t;
}

Result<CapturedOutput> RunCapture(ProcessRunner& runner, ProcessSpec spec, std::int64_t timeout_ms,
                                  const std::string& scratch_dir) {
  if (spec.argv.empty()) return Fail(ErrorKind::kInvalidArgument, "empty command");
  if (!scratch_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(scratch_dir, ec);
  }
  TempFile out_file, err_file;
  ASSIGN_OR_RETURN(auto out_path, MakeTemp(scratch_dir, "out", out_file));
  ASSIGN_OR_RETURN(auto err_path, MakeTemp(scratch_dir, "err", err_file));
  // The runner sends stdout and stderr to one file; a shell in front splits
  // stderr off into its own (paths travel in the environment, not the text).
  std::string program = spec.argv.front();
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$@\" 2>>\"$TRAINQ_CAPTURE_ERR\"",
                                   "sh"};
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  spec.argv = std::move(argv);
  spec.env["TRAINQ_CAPTURE_ERR"] = err_path;
  spec.output_path = out_path;
  ASSIGN_OR_RETURN(int pid, runner.Spawn(spec));

  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::milliseconds(2);
  std::optional<ExitStatus> status;
  while (!(status = runner.Poll(pid))) {
    if (std::chrono::steady_clock::now() >= deadline) {
      runner.KillGroup(pid, SIGKILL);
      runner.Wait(pid);
      return Fail(ErrorKind::kTimeout, "'" + program + "' did not finish within " +
                                           FormatDuration(timeout_ms) + " (killed)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  CapturedOutput result;
  result.status = *status;
  result.out = ReadFile(out_path).value_or("");
  result.err = ReadFile(err_path).value_or("");
  if (result.status.code == 127 && result.status.signal == 0 &&
      result.err.find("not found") != std::string::npos) {
    return Fail(ErrorKind::kIo, "cannot start '" + program + "': " + Tail(result.err, 200));
  }
  return result;
}

}  // namespace trainq::cloud
