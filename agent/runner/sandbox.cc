#include "agent/runner/sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

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
  a.insert(a.end(), {"--proc", "/proc"});
  if (run.tmp.empty()) {
    a.insert(a.end(), {"--tmpfs", "/tmp"});
  } else {
    a.insert(a.end(), {"--bind", run.tmp, "/tmp"});
  }
  spec.env["TMPDIR"] = "/tmp";
  auto bind_dirs = [&](const std::vector<std::string>& dirs) {
    for (const auto& w : dirs) {
      fs::path p = fs::absolute(w, ec);
      if (ec || !fs::is_directory(p, ec)) continue;
      a.insert(a.end(), {"--bind", p.string(), p.string()});
    }
  };
  // The operator's writable directories first: what is hidden stays hidden
  // inside them.
  bind_dirs(config.writable);
  // Hidden: a directory becomes an empty tmpfs, a file /dev/null. A path that
  // does not exist now needs nothing (the rest is read-only: it cannot appear
  // inside).
  for (const auto& h : config.hide) {
    fs::path p = fs::absolute(h, ec);
    if (ec || p.empty() || p == "/") continue;
    auto st = fs::status(p, ec);
    if (ec) continue;
    if (fs::is_directory(st)) {
      a.insert(a.end(), {"--tmpfs", p.string()});
    } else if (fs::exists(st)) {
      a.insert(a.end(), {"--ro-bind", "/dev/null", p.string()});
    }
  }
  // The run's own directories, over whatever the hidden paths covered (bwrap
  // makes the mount points it needs inside a hidden directory's tmpfs).
  bind_dirs(run.writable);
  if (!spec.cwd.empty()) a.insert(a.end(), {"--chdir", fs::absolute(spec.cwd, ec).string()});
  a.push_back("--");
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  spec.argv = std::move(a);
}

}  // namespace trainq
