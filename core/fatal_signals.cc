#include "core/fatal_signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

namespace trainq {

namespace {

std::atomic<int> g_groups[kMaxStopOnCrash];
static_assert(std::atomic<int>::is_always_lock_free);

// write(2) of a NUL-terminated string, what a handler may use.
void Say(const char* s) {
  std::size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Decimal text of v into buf (at least 24 bytes).
const char* Decimal(long v, char* buf) {
  char tmp[24];
  int i = 0;
  bool neg = v < 0;
  unsigned long u = neg ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    tmp[i++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0 && i < 22);
  int j = 0;
  if (neg) buf[j++] = '-';
  while (i > 0) buf[j++] = tmp[--i];
  buf[j] = '\0';
  return buf;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error: a mapped file shrank, or bad alignment)";
    case SIGABRT: return "SIGABRT (abort)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    default: return "a fatal signal";
  }
}

void OnFatalSignal(int sig) {
  char num[24];
  int groups = 0;
  for (auto& g : g_groups) {
    if (g.load(std::memory_order_relaxed) > 0) ++groups;
  }
  Say("trainq: fatal signal ");
  Say(SignalName(sig));
  Say(" in pid ");
  Say(Decimal(static_cast<long>(::getpid()), num));
  if (groups > 0) {
    Say("; stopping ");
    Say(Decimal(groups, num));
    Say(" worker process(es) it started (SIGTERM)");
  }
  Say("; exiting\n");
  StopRegisteredGroups();
  // SA_RESETHAND restored the default action: die of the same signal.
  ::raise(sig);
}

}  // namespace

void InstallFatalSignalHandlers() {
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGXFSZ, SIG_IGN);
}

int StopRegisteredGroups() {
  int n = 0;
  for (auto& g : g_groups) {
    int pid = g.load(std::memory_order_relaxed);
    if (pid <= 0) continue;
    if (::kill(-pid, SIGTERM) != 0) ::kill(pid, SIGTERM);
    ::kill(-pid, SIGCONT);  // a stopped worker acts on its SIGTERM only once it runs
    ++n;
  }
  return n;
}

bool StopOnCrash(int pid) {
  if (pid <= 0) return false;
  for (auto& g : g_groups) {
    if (g.load() == pid) return true;
  }
  for (auto& g : g_groups) {
    int empty = 0;
    if (g.compare_exchange_strong(empty, pid)) return true;
  }
  return false;
}

void ForgetStopOnCrash(int pid) {
  if (pid <= 0) return;
  for (auto& g : g_groups) {
    int expected = pid;
    g.compare_exchange_strong(expected, 0);
  }
}

}  // namespace trainq
