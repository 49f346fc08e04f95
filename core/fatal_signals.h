// What a trainq process does when it is about to die of a signal it cannot
// survive (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): one line on stderr naming
// the signal, SIGTERM (and SIGCONT) to the process groups registered here (the
// local workers `trainq serve` started, so that none is left running without
// its server), and then death by the same signal (a core dump where enabled).
// SIGXFSZ is ignored: a write past `ulimit -f` then fails with EFBIG and is
// reported like a full disk instead of killing the process without a word.
//
// Everything the handler does is async-signal-safe (write, kill, sigaction,
// raise; the registry is a fixed array of lock-free atomics).
#pragma once

namespace trainq {

// Installs the handlers (on an alternate stack, so that a stack overflow is
// reported too) and ignores SIGXFSZ. Call once, early in main.
void InstallFatalSignalHandlers();

// The process group led by `pid` is sent SIGTERM and SIGCONT if this process
// dies of a fatal signal. At most kMaxStopOnCrash groups; more are ignored
// (with a false return).
inline constexpr int kMaxStopOnCrash = 256;
bool StopOnCrash(int pid);
void ForgetStopOnCrash(int pid);
// SIGTERM and SIGCONT to every registered group now (serve's last resort at
// shutdown when its orderly stop failed); the number signalled.
int StopRegisteredGroups();

}  // namespace trainq
