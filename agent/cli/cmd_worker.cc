// `trainq worker`: the agent on a machine of a pool (agent/runner/worker.h).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/runner/worker.h"

namespace trainq {

// `trainq worker`.
void AddWorkerCommand(CLI::App& app, const CliContext& ctx) {
  // worker
  auto worker = std::make_shared<WorkerCommandOptions>();
  auto* c_worker = app.add_subcommand(
      "worker", "Run queued runs for a `trainq serve` over HTTP (a machine of a pool)");
  c_worker->add_option("--server", worker->server, "The server's base URL, e.g. http://host:8080")
      ->envname("TRAINQ_SERVER");
  c_worker->add_option("--token-file", worker->token_file, "File holding the pool's worker token")
      ->envname("TRAINQ_TOKEN_FILE");
  c_worker->add_option("--machine", worker->machine,
                       "The name the provider gave this machine (empty: started by hand)")
      ->envname("TRAINQ_MACHINE");
  c_worker->add_option("--slots", worker->slots, "Runs (or fused groups) at once")
      ->capture_default_str();
  c_worker->add_option("--gpus", worker->gpus, "auto (nvidia-smi), none, or GPU indices 0,1,...")
      ->capture_default_str();
  c_worker->add_option("--runs-per-gpu", worker->runs_per_gpu,
                       "1-GPU runs packed onto one GPU (0: the pool's runs_per_gpu)")
      ->capture_default_str();
  c_worker->add_option("--env-passthrough", worker->env_passthrough,
                       "A variable of this environment that runs also get (NAME or PREFIX*; "
                       "repeatable); runs otherwise get only PATH, HOME, LANG, ... and their own")
      ->delimiter(',');
  c_worker->add_option("--fuse-max", worker->fuse_max,
                       "Seeds of a trainer experiment run fused in one process")
      ->capture_default_str();
  c_worker->add_option("--data-dir", worker->data_dir,
                       "Checkouts, run logs and metrics (default: ./trainq-worker)");
  c_worker->add_option("--kill-grace", worker->kill_grace_s,
                       "Time between SIGTERM and SIGKILL when a run is stopped (10s; a bare "
                       "number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_worker->add_option("--source", worker->source,
                       "Checkouts from the lease's repository when reachable, else the server "
                       "(auto), or always from the server (server)")
      ->capture_default_str();
  c_worker->add_option("--orphan-timeout", worker->orphan_timeout_s,
                       "Time without an answer from the server (nothing running) before the "
                       "dead-man switch (10m; a bare number is seconds); the pool's value "
                       "replaces it once registered")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_worker->add_option("--self-stop", worker->self_stop,
                       "Shell command run by the dead-man switch or when the server refuses the "
                       "token (providers pass the pool's self_stop)");
  c_worker->add_option("--self-stop-timeout", worker->self_stop_timeout_s,
                       "Time after which a self-stop command still running is killed (2m; a bare "
                       "number is seconds; SIGTERM to the worker also ends it)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_worker->add_option("--sandbox", worker->sandbox,
                       "Where runs start: bwrap (a bubblewrap sandbox: no view of this worker, "
                       "its files or its token; an error without bwrap), none, or auto (bwrap "
                       "when installed)")
      ->capture_default_str();
  c_worker->add_option("--sandbox-hide", worker->sandbox_hide,
                       "A file or directory runs must not see (repeatable; the data dir and the "
                       "token file always are)");
  c_worker->add_option("--sandbox-writable", worker->sandbox_writable,
                       "A directory runs may write besides their checkout, run directory and "
                       "/tmp (repeatable)");
  c_worker->add_flag("--once", worker->once,
                     "Exit when a lease comes back empty and nothing runs");
  c_worker->callback([=] {
    CatchStopSignals();
    auto r = CmdWorker(*worker, *ctx.clock, StopFlag());
    *ctx.exit_code = r ? *r : ReportStatus(std::unexpected(r.error()));
  });
}

}  // namespace trainq
