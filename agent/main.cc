// trainq: the daemon, the worker and the user commands in one binary.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <vector>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "agent/cli/cli.h"
#include "agent/results/sweep.h"
#include "agent/runner/worker.h"
#include "core/strings.h"
#include "core/log.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

void InstallSignalHandlers() {
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a sleep ends early so the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int Report(const trainq::Status& st) {
  if (st) return 0;
  std::cerr << "trainq: error: " << st.error().message << "\n";
  return 1;
}

// The first argument that is neither an option nor --db's value: the command
// the user meant, when CLI11 found none.
std::optional<std::string> FirstWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--db") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    return std::string(a);
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainq: repeat each training config N times and tell a real change from seed noise"};
  app.require_subcommand(1);
  // Global options (--db, -v, -q) may also follow the subcommand.
  app.fallthrough();
  app.set_version_flag("--version", "trainq 0.1.0");
  std::string db = trainq::DefaultDbPath();
  int verbosity = 0;
  bool quiet = false;
  auto* db_option =
      app.add_option("--db", db,
                     "SQLite database file (default: $TRAINQ_DB, else ./trainq.db when it "
                     "exists, else $XDG_DATA_HOME/trainq/trainq.db or "
                     "~/.local/share/trainq/trainq.db)")
          ->capture_default_str();
  // The per-user default: its folder is made on first use, and its creation said once.
  bool user_db_new = false;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");
  app.add_flag("-q,--quiet", quiet, "Only warnings and errors in the log");
  int exit_code = 0;
  const auto& clock = trainq::SystemClock::Get();

  // submit
  trainq::SubmitOptions submit;
  auto* c_submit = app.add_subcommand("submit", "Queue N repeated runs of experiments at a commit");
  c_submit->add_option("--repo", submit.repo, "Git repository holding trainq.yaml")
      ->capture_default_str();
  c_submit->add_option("--commit", submit.commit, "Revision to run (sha, branch, tag, HEAD~1)")
      ->capture_default_str();
  c_submit->add_option("--experiment,-e", submit.experiments,
                       "Experiment to run (repeatable; default: all)");
  c_submit->add_option("--repeats,-n", submit.repeats, "Runs per experiment (overrides trainq.yaml)");
  c_submit->add_flag("--json", submit.json, "Print the result as JSON");
  c_submit->add_flag("--with-baseline", submit.with_baseline,
                     "Queue the parent commit's runs (same seeds) when no baseline batch exists");
  c_submit->add_flag("--allow-dirty", submit.allow_dirty,
                     "No warning when trainq.yaml, a trainer spec or a watched file has "
                     "uncommitted changes");
  c_submit->add_option("--max-experiments", submit.limits.max_experiments,
                       "Refuse a submission of more experiments than this")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c_submit->add_option("--max-runs", submit.limits.max_runs,
                       "Refuse a submission of more runs than this (all experiments together)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c_submit->callback([&] {
    submit.db = db;
    exit_code = Report(trainq::CmdSubmit(submit, clock, std::cout));
  });

  // serve
  trainq::ServeOptions serve;
  auto* c_serve = app.add_subcommand(
      "serve", "The daemon: webhooks, the worker API, and machines that run the queue");
  c_serve->add_option("--slots", serve.slots,
                      "Runs at once per machine of the default local pool")
      ->capture_default_str();
  c_serve->add_option("--machines", serve.machines,
                      "Most worker processes the default local pool starts (0: only workers started by hand)")
      ->capture_default_str();
  c_serve->add_option("--env-passthrough", serve.env_passthrough,
                      "A variable of serve's environment that runs of the default local pool also "
                      "get (NAME or PREFIX*; repeatable)")
      ->delimiter(',');
  c_serve->add_option("--fuse-max", serve.fuse_max,
                      "Seeds of a trainer: experiment that a worker of the default local pool fuses into one "
                      "trainq-train process")
      ->capture_default_str();
  c_serve->add_option("--idle-grace", serve.idle_grace_s,
                      "Seconds a machine of the default local pool may idle before it is stopped")
      ->capture_default_str();
  c_serve->add_flag("--inproc", serve.inproc,
                    "Run on this process's own slots: no workers, no machines");
  c_serve->add_flag("--until-idle", serve.until_idle, "Exit once the queue is empty");
  c_serve->add_option("--data-dir", serve.data_dir,
                      "Run logs, metrics and checkouts (default: trainq-data next to the db)");
  c_serve->add_option("--gpus", serve.gpus, "GPU ids to hand out, e.g. 0,1 (CUDA_VISIBLE_DEVICES)");
  c_serve->add_option("--lease", serve.lease_s, "Lease length in seconds")->capture_default_str();
  c_serve->add_option("--heartbeat", serve.heartbeat_s, "Heartbeat interval in seconds")
      ->capture_default_str();
  c_serve->add_option("--poll-ms", serve.poll_ms, "Queue poll interval in milliseconds")
      ->capture_default_str();
  c_serve->add_option("--kill-grace", serve.kill_grace_s,
                      "Seconds between SIGTERM and SIGKILL when a run is stopped")
      ->capture_default_str();
  c_serve->add_option("--listen", serve.listen,
                      "HTTP server address HOST:PORT, or off with --inproc (default: the config's, "
                      "else 127.0.0.1:8080; a free loopback port with --until-idle and no "
                      "--config)");
  c_serve->add_option("--config", serve.config,
                      "Server config (YAML): watched repositories, webhook secrets, polling, "
                      "commit statuses");
  c_serve->callback([&] {
    serve.db = db;
    InstallSignalHandlers();
    exit_code = Report(trainq::CmdServe(serve, clock, g_stop));
  });

  // machines
  trainq::MachinesOptions machines;
  auto* c_machines = app.add_subcommand(
      "machines", "Machines of the pools: state, age, idle time, runs done, billed time and cost");
  c_machines->add_flag("--all", machines.all, "Stopped machines too");
  c_machines->add_flag("--batches", machines.batches, "Cost per batch");
  c_machines->add_flag("--json", machines.json, "Print as JSON");
  c_machines->callback([&] {
    machines.db = db;
    exit_code = Report(trainq::CmdMachines(machines, clock, std::cout));
  });

  // pools reset
  trainq::PoolsResetOptions pools_reset;
  auto* c_pools = app.add_subcommand("pools", "Pools of machines: `trainq pools reset NAME`");
  c_pools->require_subcommand(1);
  auto* c_pools_reset = c_pools->add_subcommand(
      "reset", "Forget a pool's failed boots, so that a failing pool boots machines again");
  c_pools_reset->add_option("pool", pools_reset.pool, "The pool's name")->required();
  c_pools_reset->callback([&] {
    pools_reset.db = db;
    exit_code = Report(trainq::CmdPoolsReset(pools_reset, clock, std::cout));
  });

  // status
  trainq::StatusOptions status;
  auto* c_status = app.add_subcommand("status", "Queue depth, running runs, slots and batch progress");
  c_status->add_flag("--json", status.json, "Print as JSON");
  c_status->add_option("--server", status.server,
                       "Ask a running `trainq serve` (its base URL) instead of the database")
      ->envname("TRAINQ_SERVER");
  c_status->callback([&] {
    status.db = db;
    exit_code = Report(trainq::CmdStatus(status, clock, std::cout));
  });

  // show
  trainq::ShowOptions show;
  auto* c_show = app.add_subcommand("show", "A commit's batches: why each runs, progress, spread");
  c_show->add_option("COMMIT", show.commit, "Revision: HEAD, a branch, a tag, a (short) commit id")
      ->required();
  c_show->add_option("--repo", show.repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_show->add_flag("--json", show.json, "Print as JSON");
  c_show->callback([&] {
    show.db = db;
    exit_code = Report(trainq::CmdShow(show, std::cout));
  });

  // runs
  trainq::RunsOptions runs;
  auto* c_runs = app.add_subcommand("runs", "List runs with their state, metric and last error");
  c_runs->add_option("--batch,-b", runs.batch, "Only this batch");
  c_runs->add_option("--state", runs.state, "Only runs in this state");
  c_runs->add_option("--limit", runs.limit, "At most this many (0: all)");
  c_runs->add_flag("--json", runs.json, "Print as JSON");
  c_runs->callback([&] {
    runs.db = db;
    exit_code = Report(trainq::CmdRuns(runs, std::cout));
  });

  // cancel
  trainq::CancelOptions cancel;
  auto* c_cancel = app.add_subcommand("cancel", "Cancel a batch (or one run with --run)");
  c_cancel->add_option("ID", cancel.id, "Batch id (run id with --run)")->required();
  c_cancel->add_flag("--run", cancel.run, "ID names a run");
  c_cancel->add_flag("--json", cancel.json, "Print what was cancelled as JSON");
  c_cancel->callback([&] {
    cancel.db = db;
    exit_code = Report(trainq::CmdCancel(cancel, clock, std::cout));
  });

  // report
  trainq::ReportOptions report;
  auto* c_report = app.add_subcommand(
      "report", "Per batch n, mean, sd, min, max; with --out, the spread report as files");
  c_report->add_option("--since", report.since, "Only batches queued in this window, e.g. 7d");
  c_report->add_option("--experiment,-e", report.experiments, "Only this experiment (repeatable)");
  c_report->add_option("--out", report.out_dir,
                       "Write report.md, report.html, report.json and runs.csv here");
  c_report->add_option("--format", report.formats, "Files to write with --out")
      ->capture_default_str();
  c_report->add_flag("--json", report.json, "Print as JSON (without --out)");
  c_report->add_option("--server", report.server,
                       "Ask a running `trainq serve` (its base URL; needs its read token) "
                       "instead of the database")
      ->envname("TRAINQ_SERVER");
  c_report->add_option("--token-file", report.token_file,
                       "File holding the server's read token (default: $TRAINQ_READ_TOKEN)");
  c_report->callback([&] {
    report.db = db;
    exit_code = Report(trainq::CmdReport(report, clock, std::cout));
  });

  // compare
  trainq::CompareCommandOptions compare;
  auto* c_compare = app.add_subcommand(
      "compare", "Compare the experiments of two commits: difference, test, verdict");
  c_compare->add_option("REV_A", compare.rev_a, "The change (commit id, or a name with --repo)")
      ->required();
  c_compare->add_option("REV_B", compare.rev_b, "What it is compared with")->required();
  c_compare->add_option("--repo", compare.repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_compare->add_option("--experiment,-e", compare.experiments, "Only this experiment");
  c_compare->add_flag("--json", compare.json, "Print as JSON");
  c_compare->callback([&] {
    compare.db = db;
    exit_code = Report(trainq::CmdCompare(compare, std::cout));
  });

  // gate
  trainq::GateOptions gate;
  auto* c_gate = app.add_subcommand(
      "gate",
      "Exit 0 when no experiment at REV is worse than the baseline, 1 when one is, 3 when "
      "undecided");
  c_gate->add_option("REV", gate.rev, "Revision to check")->capture_default_str();
  c_gate->add_option("--baseline", gate.baseline, "Branch or commit to compare with")
      ->capture_default_str();
  c_gate->add_option("--repo", gate.repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_gate->add_option("--experiment,-e", gate.experiments, "Only this experiment (repeatable)");
  c_gate->add_flag("--json", gate.json, "Print the decision as JSON");
  std::string gate_wait;
  c_gate->add_option("--wait", gate_wait,
                     "Wait up to this long (e.g. 30m) for the runs of both sides to end");
  bool gate_strict = false;
  c_gate->add_flag("--strict", gate_strict,
                   "Accepted for old scripts: undecided always exits 3 now");
  c_gate->add_option("--server", gate.server,
                     "Ask a running `trainq serve` (its base URL; needs its read token) instead "
                     "of the database; --repo then names one of its repositories")
      ->envname("TRAINQ_SERVER");
  c_gate->add_option("--token-file", gate.token_file,
                     "File holding the server's read token (default: $TRAINQ_READ_TOKEN)");
  c_gate->callback([&] {
    gate.db = db;
    // With --server, --repo names a repository of the server (url or short
    // name), not a local directory: "." is no default there.
    if (!gate.server.empty() && c_gate->get_option("--repo")->count() == 0) gate.repo.clear();
    if (!gate_wait.empty()) {
      auto w = trainq::ParseDurationSeconds(gate_wait);
      if (!w) {
        exit_code = Report(std::unexpected(w.error())) + 1;
        return;
      }
      gate.wait_s = *w;
    }
    auto r = trainq::CmdGate(gate, std::cout);
    exit_code = r ? *r : Report(std::unexpected(r.error())) + 1;
  });

  // worker
  trainq::WorkerCommandOptions worker;
  auto* c_worker = app.add_subcommand(
      "worker", "Run queued runs for a `trainq serve` over HTTP (a machine of a pool)");
  c_worker->add_option("--server", worker.server, "The server's base URL, e.g. http://host:8080")
      ->envname("TRAINQ_SERVER");
  c_worker->add_option("--token-file", worker.token_file, "File holding the pool's worker token")
      ->envname("TRAINQ_TOKEN_FILE");
  c_worker->add_option("--machine", worker.machine,
                       "The name the provider gave this machine (empty: started by hand)")
      ->envname("TRAINQ_MACHINE");
  c_worker->add_option("--slots", worker.slots, "Runs (or fused groups) at once")
      ->capture_default_str();
  c_worker->add_option("--gpus", worker.gpus, "auto (nvidia-smi), none, or GPU indices 0,1,...")
      ->capture_default_str();
  c_worker->add_option("--runs-per-gpu", worker.runs_per_gpu,
                       "1-GPU runs packed onto one GPU (0: the pool's runs_per_gpu)")
      ->capture_default_str();
  c_worker->add_option("--env-passthrough", worker.env_passthrough,
                       "A variable of this environment that runs also get (NAME or PREFIX*; "
                       "repeatable); runs otherwise get only PATH, HOME, LANG, ... and their own")
      ->delimiter(',');
  c_worker->add_option("--fuse-max", worker.fuse_max,
                       "Seeds of a trainer experiment run fused in one process")
      ->capture_default_str();
  c_worker->add_option("--data-dir", worker.data_dir,
                       "Checkouts, run logs and metrics (default: ./trainq-worker)");
  c_worker->add_option("--kill-grace", worker.kill_grace_s,
                       "Seconds between SIGTERM and SIGKILL when a run is stopped")
      ->capture_default_str();
  c_worker->add_option("--source", worker.source,
                       "Checkouts from the lease's repository when reachable, else the server "
                       "(auto), or always from the server (server)")
      ->capture_default_str();
  c_worker->add_option("--orphan-timeout", worker.orphan_timeout_s,
                       "Seconds without an answer from the server (nothing running) before the "
                       "dead-man switch; the pool's value replaces it once registered")
      ->capture_default_str();
  c_worker->add_option("--self-stop", worker.self_stop,
                       "Shell command run by the dead-man switch or when the server refuses the "
                       "token (providers pass the pool's self_stop)");
  c_worker->add_option("--self-stop-timeout", worker.self_stop_timeout_s,
                       "Seconds after which a self-stop command still running is killed (SIGTERM "
                       "to the worker also ends it)")
      ->capture_default_str();
  c_worker->add_flag("--once", worker.once,
                     "Exit when a lease comes back empty and nothing runs");
  c_worker->callback([&] {
    InstallSignalHandlers();
    auto r = trainq::CmdWorker(worker, clock, g_stop);
    exit_code = r ? *r : Report(std::unexpected(r.error()));
  });

  trainq::AddStatsCommands(app, &exit_code);
  trainq::AddSweepCommands(app, &db, &exit_code);
  trainq::AddSimulateCommand(app, &exit_code);

  app.parse_complete_callback([&] {
    trainq::InitLogging(verbosity, quiet);
    if (db_option->count() == 0 && db == trainq::UserDbPath()) {
      std::error_code ec;
      user_db_new = !std::filesystem::exists(db, ec);
      if (user_db_new) std::filesystem::create_directories(std::filesystem::path(db).parent_path(), ec);
    }
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // An unknown command: say which word was not understood (CLI11 would say
    // "A subcommand is required").
    if (app.get_subcommands().empty()) {
      const CLI::App& capp = app;
      std::vector<std::string> names;
      for (const auto* sub : capp.get_subcommands([](const CLI::App*) { return true; })) {
        names.push_back(sub->get_name());
      }
      auto word = FirstWord(argc, argv);
      if (word && std::find(names.begin(), names.end(), *word) == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        std::cerr << "trainq: unknown command '" << *word << "' (commands: " << known
                  << "; see trainq --help)\n";
        return 2;
      }
    }
    // Usage errors exit 2 (as getopt tools do), with CLI11's message;
    // --help and --version exit 0.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  std::error_code ec;
  if (user_db_new && std::filesystem::exists(db, ec)) {
    std::cerr << "trainq: created " << db << " (state of every trainq command; set TRAINQ_DB or "
              << "--db to keep it elsewhere)\n";
  }
  return exit_code;
}
