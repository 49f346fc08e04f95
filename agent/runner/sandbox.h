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
// Modes: "bwrap" (the full sandbox, or the worker refuses to start), "none",
// and "auto": the strongest form that starts here, found by a probe at start
// (ProbeSandbox, issue 37): "bwrap" (full), "bwrap-hostproc" (where a
// container runtime masks /proc, so bwrap cannot mount a fresh one: the run
// sees this machine's process list, but the worker is not dumpable, so not its
// environment, descriptors or root), else "none". The form a worker found is
// registered with serve and shown by `trainq machines`, `trainq status --json`
// and the dashboard.
//
// Paths are bound and hidden by their canonical names (symlinks followed:
// Debian's /var/run is /run). A run writes only below its own `work`
// directory (RunPaths::work), fresh for each attempt; the worker's own files
// of the run (its output log) are outside every tree a run can write.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/process.h"
#include "core/result.h"

namespace trainq {

struct SandboxConfig {
  std::string mode = "none";          // auto | bwrap | none
  std::vector<std::string> hide;      // files or directories the run must not see
  std::vector<std::string> writable;  // extra directories the run may write (the operator's)
  // Directories bound read-only over a private /tmp or a hidden path, so that
  // what runs need of trainq (trainq-train, wherever it is installed) stays
  // visible: a build or an install under /tmp.
  std::vector<std::string> readable;
  bool own_proc = true;  // false: the "bwrap-hostproc" form
};

// What a worker's probe found: the form its runs get, and why.
struct SandboxState {
  std::string form = "none";  // bwrap | bwrap-hostproc | none
  std::string note;           // one line: why this form ("" for the full one)
};

// Runs `bwrap <the flags runs get> -- true` (the config's hides, binds and
// /proc, a throwaway run directory under `scratch_dir`) and settles the form:
// with "auto" the strongest that starts; with "bwrap" the full one or an error
// that starts "sandbox: bwrap cannot start here:" with bwrap's own words.
// `config.own_proc` is set to the form found; `bwrap` cleared for "none".
Result<SandboxState> ProbeSandbox(const std::string& mode, std::string& bwrap,
                                  SandboxConfig& config, const std::string& scratch_dir);

// A path bound or hidden as it is named inside the sandbox: its canonical
// form (symlinks followed), or "" when it does not exist.
std::string CanonicalPath(const std::string& path);

// What a failed run's error adds when its output shows the sandbox's limits:
// a write to a read-only path, a file missing under /tmp, or bwrap's own
// set-up error. "" when nothing points at the sandbox.
std::string SandboxHint(const std::string& log_text);

// The environment that points the common ML libraries' caches at `cache_dir`
// (XDG_CACHE_HOME, HF_HOME, TORCH_HOME, ...), for runs whose HOME is
// read-only. Variables the operator passes through are kept as they are.
std::map<std::string, std::string> CacheEnvironment(const std::string& cache_dir);

// "auto", "bwrap" or "none"; anything else is an error naming `what`.
Status CheckSandboxMode(const std::string& mode, const std::string& what);

// The bwrap binary the mode uses: "" for none (or auto without bwrap); an
// error for bwrap when it is not installed (PATH, /usr/bin/bwrap).
Result<std::string> ResolveSandbox(const std::string& mode);

// What a run's own sandbox holds besides SandboxConfig.
struct SandboxRun {
  std::vector<std::string> writable;  // its checkout, work directory, the worker's cache
  std::vector<std::string> readable;  // a fused group's seed links
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
