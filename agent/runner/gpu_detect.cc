#include "agent/runner/gpu_detect.h"

#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/process.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  s = Trim(s);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  for (const auto& dir : Split(path, ':')) {
    if (dir.empty()) continue;
    fs::path p = fs::path(dir) / program;
    if (::access(p.c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

Result<std::vector<GpuInfo>> ParseNvidiaSmi(std::string_view text) {
  std::vector<GpuInfo> gpus;
  int line_no = 0;
  for (const auto& raw : Split(text, '\n')) {
    ++line_no;
    auto line = Trim(raw);
    if (line.empty()) continue;
    // The name may itself hold commas in theory: index first, memory last.
    size_t first = line.find(',');
    size_t last = line.rfind(',');
    GpuInfo g;
    if (first == std::string_view::npos || first == last ||
        !ParseInt(line.substr(0, first), &g.index)) {
      return Fail(ErrorKind::kInvalidArgument, "nvidia-smi output line " + std::to_string(line_no) +
                                                   ": expected \"index, name, "
                                                   "memory\", got \"" +
                                                   std::string(line) + "\"");
    }
    g.name = std::string(Trim(line.substr(first + 1, last - first - 1)));
    auto mem = Trim(line.substr(last + 1));
    // "[N/A]" (some MIG or vGPU setups): memory unknown, the GPU still counts.
    if (!ParseInt(mem, &g.memory_mb)) g.memory_mb = 0;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<GpuInfo> DetectGpus() {
  if (!OnPath("nvidia-smi")) return {};
  // Through the process runner (its own process group, no inherited fds),
  // its output (stdout and stderr) into a file of its own.
  std::string out_path = (fs::temp_directory_path() / "trainq-nvidia-smi-XXXXXX").string();
  int fd = ::mkstemp(out_path.data());
  if (fd < 0) {
    spdlog::warn("nvidia-smi: no temporary file ({}); no GPUs offered", std::strerror(errno));
    return {};
  }
  ::close(fd);
  ProcessSpec spec;
  spec.argv = {"nvidia-smi", "--query-gpu=index,name,memory.total",
               "--format=csv,noheader,nounits"};
  spec.output_path = out_path;
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  std::optional<ExitStatus> status;
  if (pid) status = runner.Wait(*pid);
  std::string out = ReadFile(out_path).value_or("");
  std::error_code ec;
  fs::remove(out_path, ec);
  if (!pid || !status->ok()) {
    spdlog::warn("nvidia-smi failed ({}); no GPUs offered",
                 pid ? status->Describe() : pid.error().message);
    return {};
  }
  auto gpus = ParseNvidiaSmi(out);
  if (!gpus) {
    spdlog::warn("{}; no GPUs offered", gpus.error().message);
    return {};
  }
  return *gpus;
}

Result<std::vector<GpuInfo>> ResolveGpus(const std::string& spec) {
  auto s = Trim(spec);
  if (s == "auto") return DetectGpus();
  if (s.empty() || s == "none") return std::vector<GpuInfo>{};
  std::vector<GpuInfo> gpus;
  for (const auto& part : Split(s, ',')) {
    GpuInfo g;
    if (!ParseInt(part, &g.index) || g.index < 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--gpus: expected auto, none or a list of GPU indices like 0,1; got \"" +
                      std::string(s) + "\"");
    }
    gpus.push_back(g);
  }
  return gpus;
}

std::int64_t ParseMemTotalMb(std::string_view meminfo) {
  for (const auto& raw : Split(meminfo, '\n')) {
    auto line = Trim(raw);
    if (!line.starts_with("MemTotal:")) continue;
    auto rest = Trim(line.substr(9));
    size_t sp = rest.find(' ');
    std::int64_t kb = 0;
    if (ParseInt(rest.substr(0, sp), &kb)) return kb / 1024;
  }
  return 0;
}

std::int64_t DetectMemoryMb() {
  auto text = ReadFile("/proc/meminfo");
  return text ? ParseMemTotalMb(*text) : 0;
}

}  // namespace trainq
