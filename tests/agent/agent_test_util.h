// Helpers shared by the agent tests: process liveness, small file helpers.
#pragma once

#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "core/http_client.h"
#include "core/process.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing {

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void Spit(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// The pid written to `path` by a script (`echo $! > file`), or 0 while the file is
// missing or incomplete.
inline int ReadPid(const std::filesystem::path& path) {
  std::string s = Slurp(path);
  if (s.empty() || s.back() != '\n') return 0;
  try {
    return std::stoi(s);
  } catch (...) {
    return 0;
  }
}

// True when `pid` no longer runs. A zombie (ended, not yet reaped by whichever
// process adopted it) counts as gone.
inline bool ProcessGone(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos || rp + 2 >= stat.size()) return true;  // vanished meanwhile
  return stat[rp + 2] == 'Z' || stat[rp + 2] == 'X';
}

// A daemon a test started (`trainq serve`): killed with its process group
// when the test ends early; set pid = 0 once the test has reaped it.
struct Daemon {
  PosixProcessRunner runner;
  int pid = 0;

  // Starts `trainq --db DB serve --slots 2 --poll-ms 20 --config CONFIG
  // --listen 127.0.0.1:PORT` in `dir` (its log in dir/serve.log) and waits
  // until /healthz answers 200. False when it did not start or never answered.
  bool ServeWithConfig(const std::string& db, const std::string& config, int port,
                       const std::string& dir) {
    auto spawned = runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--slots", "2",
                                  "--poll-ms", "20", "--config", config, "--listen",
                                  "127.0.0.1:" + std::to_string(port)},
                                 {},
                                 dir,
                                 dir + "/serve.log"});
    if (!spawned) return false;
    pid = *spawned;
    CurlHttpClient http;
    std::string url = "http://127.0.0.1:" + std::to_string(port) + "/healthz";
    return WaitFor(
        [&] {
          auto r = http.Send({"GET", url, {}, "", 1000});
          return r && r->status == 200;
        },
        std::chrono::seconds(20));
  }

  ~Daemon() {
    if (pid > 0) {
      runner.KillGroup(pid, SIGKILL);
      runner.Wait(pid);
    }
  }
};

}  // namespace trainq::testing
