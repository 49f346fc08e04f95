#include "core/fatal_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>

using namespace trainq;

namespace {

// Reads what is there in `fd` until EOF.
std::string Drain(int fd) {
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

}  // namespace

TEST_CASE("A fatal signal is logged, the registered process groups get SIGTERM, and the "
          "process dies of the signal",
          "[fatal_signals]") {
#if defined(__SANITIZE_THREAD__)
  // TSan defers and re-delivers signals through its own handlers: the
  // handler's kill() of the registered group does not reach the stand-in
  // (ci/sanitize tsan-quick). ASan and the plain build run this test.
  WARN("not run under ThreadSanitizer: it takes over signal delivery");
  return;
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers take SIGSEGV and SIGBUS for their own reports.
  const int sig = GENERATE(SIGABRT, SIGILL);
#else
  const int sig = GENERATE(SIGSEGV, SIGABRT, SIGBUS, SIGILL);
#endif
  // This process adopts the orphaned worker stand-in, to see how it ended.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int err[2], said[2];
  REQUIRE(pipe(err) == 0);
  REQUIRE(pipe(said) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The "serve": a worker in its own process group, registered, then a crash.
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    close(said[0]);
    InstallFatalSignalHandlers();
    pid_t worker = fork();
    if (worker == 0) {
      setpgid(0, 0);
      execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(worker, worker);
    StopOnCrash(worker);
    (void)!write(said[1], &worker, sizeof worker);
    close(said[1]);
    if (sig == SIGSEGV) {
      volatile int* p = nullptr;
      *p = 1;  // a real invalid access
    }
    raise(sig);
    _exit(0);
  }
  close(err[1]);
  close(said[1]);
  pid_t worker = 0;
  REQUIRE(read(said[0], &worker, sizeof worker) == sizeof worker);
  close(said[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == sig);
  const std::string log = Drain(err[0]);
  close(err[0]);
  CHECK_THAT(log, Catch::Contains("trainq: fatal signal SIG"));
  CHECK_THAT(log, Catch::Contains("stopping 1 worker process(es)"));
  // The worker was adopted by this process: it ended of the SIGTERM.
  int wstatus = 0;
  pid_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((got = waitpid(worker, &wstatus, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (got == 0) kill(worker, SIGKILL);
  REQUIRE(got == worker);
  CHECK(WIFSIGNALED(wstatus));
  CHECK(WTERMSIG(wstatus) == SIGTERM);
}

TEST_CASE("SIGXFSZ is ignored: a write past ulimit -f fails with EFBIG instead of killing",
          "[fatal_signals]") {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    InstallFatalSignalHandlers();
    rlimit l{};
    getrlimit(RLIMIT_FSIZE, &l);
    l.rlim_cur = 1024;
    setrlimit(RLIMIT_FSIZE, &l);
    char path[] = "/tmp/trainq-xfsz-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    char buf[4096] = {};
    ssize_t first = write(fd, buf, sizeof buf);   // short: up to the limit
    ssize_t second = write(fd, buf, sizeof buf);  // past it: EFBIG
    _exit(first == 1024 && second < 0 && errno == EFBIG ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
