#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace trainq {

namespace {

ExitStatus FromWaitStatus(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

std::map<std::string, std::string> ParentEnvironment() {
  std::map<std::string, std::string> merged;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return merged;
}

}  // namespace

bool EnvNameMatches(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (!p.empty() && p.back() == '*') {
      if (name.starts_with(std::string_view(p).substr(0, p.size() - 1))) return true;
    } else if (name == p) {
      return true;
    }
  }
  return false;
}

bool ValidEnvPattern(std::string_view pattern) {
  if (pattern.ends_with('*')) pattern.remove_suffix(1);
  if (pattern.empty()) return false;
  for (char c : pattern) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

std::vector<std::string> IntersectEnvPatterns(const std::vector<std::string>& a,
                                              const std::vector<std::string>& b) {
  // Pairwise: a name with anything that matches it is the name; two prefixes
  // meet in the longer one when one extends the other, else nowhere.
  auto meet = [](const std::string& x, const std::string& y) -> std::optional<std::string> {
    const bool px = !x.empty() && x.back() == '*';
    const bool py = !y.empty() && y.back() == '*';
    if (!px && !py) return x == y ? std::optional(x) : std::nullopt;
    if (!px) return EnvNameMatches(x, {y}) ? std::optional(x) : std::nullopt;
    if (!py) return EnvNameMatches(y, {x}) ? std::optional(y) : std::nullopt;
    std::string_view sx(x.data(), x.size() - 1), sy(y.data(), y.size() - 1);
    if (sx.starts_with(sy)) return x;
    if (sy.starts_with(sx)) return y;
    return std::nullopt;
  };
  std::vector<std::string> out;
  for (const auto& x : a) {
    for (const auto& y : b) {
      auto m = meet(x, y);
      if (m && std::find(out.begin(), out.end(), *m) == out.end()) out.push_back(*m);
    }
  }
  return out;
}

std::map<std::string, std::string> RunEnvironment(const std::vector<std::string>& passthrough) {
  static const std::vector<std::string> kBase = {"PATH",  "HOME",   "USER",     "LOGNAME",
                                                 "SHELL", "LANG",   "LANGUAGE", "LC_*",
                                                 "TZ",    "TMPDIR", "TERM",     "SLURM_*"};
  std::map<std::string, std::string> env;
  for (auto& [k, v] : ParentEnvironment()) {
    if (EnvNameMatches(k, kBase) || EnvNameMatches(k, passthrough)) env[k] = v;
  }
  if (!env.contains("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  return env;
}

std::string ExitStatus::Describe() const {
  if (signal != 0) {
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "exit code " + std::to_string(code);
}

Result<int> PosixProcessRunner::Spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) return Fail(ErrorKind::kInvalidArgument, "empty command");

  // Environment: the parent's (unless the spec gives the whole of it), with
  // spec.env added or replacing.
  std::map<std::string, std::string> merged =
      spec.inherit_env ? ParentEnvironment() : RunEnvironment(spec.pass_env);
  for (const auto& [k, v] : spec.env) merged[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(merged.size());
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_copy = spec.argv;
  std::vector<char*> argv;
  for (auto& a : argv_copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  // Children start with default signal dispositions and an empty mask, even
  // when the daemon blocks or ignores signals.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!spec.output_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, spec.output_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  if (!spec.cwd.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());
  }
  // Nothing but 0, 1 and 2: libraries (cpprest's sockets, libcurl) do not
  // all open their descriptors close-on-exec.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);

  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Fail(ErrorKind::kIo, "cannot start '" + spec.argv[0] + "': " + std::strerror(rc));
  }
  return static_cast<int>(pid);
}

std::optional<ExitStatus> PosixProcessRunner::Poll(int pid) {
  int status = 0;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return ExitStatus{.code = -1, .signal = 0};
  return FromWaitStatus(status);
}

ExitStatus PosixProcessRunner::Wait(int pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return ExitStatus{.code = -1, .signal = 0};
  return FromWaitStatus(status);
}

void PosixProcessRunner::KillGroup(int pid, int signal) {
  if (pid > 0) ::kill(-pid, signal);
}

}  // namespace trainq
