// The sandbox a run's process starts in (issue 25): bubblewrap (`bwrap`,
// Debian's bubblewrap package) gives the run its own user, pid, mount, IPC,
// UTS and cgroup namespaces, so that a training command cannot read the
// environment, command line or descriptors of trainq serve or its worker (it
// sees no process outside its own), cannot read the paths trainq hides from it
// (the worker's data dir and token file; for a local pool, serve's database,
// config, `{file:}` secrets and data dir: each an empty tmpfs or /dev/null
// inside), and cannot write anywhere but its own checkout, its run directory
// (metrics file, output dir), a private /tmp and the paths the operator lists.
// The rest of the file system is bound read-only, so Python environments,
// datasets and tool chains are where they are outside. GPU device nodes
// (/dev/nvidia*, /dev/dri, /dev/infiniband) are bound as they are; /dev is
// otherwise bwrap's minimal one with a private /dev/shm. A multi-process gang
// rank shares the host's /dev/shm and IPC namespace (NCCL's shared-memory
// transport between ranks of one node needs them). The network is shared:
// data loaders, rendezvous and package downloads work; the worker API is
// reachable but the run has no token for it.
//
// Modes: "bwrap" (an error when bwrap is not installed), "none", and "auto"
// (bwrap when it is installed, else none, said once in the log).
#pragma once

#include <string>
#include <vector>

#include "core/process.h"
#include "core/result.h"

namespace trainq {

struct SandboxConfig {
  std::string mode = "none";          // auto | bwrap | none
  std::vector<std::string> hide;      // files or directories the run must not see
  std::vector<std::string> writable;  // extra directories the run may write (the operator's)
};

// "auto", "bwrap" or "none"; anything else is an error naming `what`.
Status CheckSandboxMode(const std::string& mode, const std::string& what);

// The bwrap binary the mode uses: "" for none (or auto without bwrap); an
// error for bwrap when it is not installed (PATH, /usr/bin/bwrap).
Result<std::string> ResolveSandbox(const std::string& mode);

// What a run's own sandbox holds besides SandboxConfig.
struct SandboxRun {
  std::vector<std::string> writable;  // its checkout, run directory, group directory
  std::string tmp;                    // a directory of its own bound as /tmp ("" = a tmpfs)
  bool share_ipc = false;             // a gang rank: the host's /dev/shm and IPC namespace
};

// Wraps `spec` (argv, cwd) in `bwrap`: the process it starts is the same
// command with the same environment and output, inside the sandbox. The
// caller's process group handling is unchanged (bwrap stays in the group, and
// --die-with-parent takes the sandbox down with it).
void WrapInSandbox(ProcessSpec& spec, const std::string& bwrap, const SandboxConfig& config,
                   const SandboxRun& run);

}  // namespace trainq
