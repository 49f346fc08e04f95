// The user commands of the `trainq` binary. Each takes its options and writes
// to `out`; errors come back as Error (main prints them and exits non-zero).
#pragma once

#include <atomic>
#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "agent/repo/manifest_check.h"
#include "core/clock.h"
#include "core/result.h"

namespace CLI {
class App;
class ParseError;
class Validator;
}

namespace trainq {

class Store;

struct SubmitOptions {
  std::string db;
  std::string repo = ".";
  std::string commit = "HEAD";
  std::vector<std::string> experiments;  // empty: all
  std::optional<int> repeats;
  bool json = false;
  bool with_baseline = false;  // queue the parent's batch when no baseline exists
  SubmitLimits limits;  // --max-experiments, --max-runs
  bool allow_dirty = false;  // no warning about uncommitted changes to relevant files
  // Queue runs even where an ancestor's batch has the same inputs (default:
  // that batch is reused, agent/results/baseline.h FindReusableBatch).
  bool rerun = false;
  // `trainq repro`: run the first `repro_runs` seeds of each experiment a
  // second time (a companion batch "x@repro"), whatever `determinism:` says.
  std::optional<int> repro_runs;
};
Status CmdSubmit(const SubmitOptions& o, const Clock& clock, std::ostream& out);

struct ServeOptions {
  std::string db;
  int slots = 1;
  bool until_idle = false;
  std::string data_dir;  // default: <db dir>/trainq-data
  std::string gpus;      // "0,1" or empty
  std::int64_t lease_s = 60;
  std::int64_t heartbeat_s = 10;
  std::int64_t poll_ms = 200;
  std::int64_t kill_grace_s = 10;
  // The HTTP server (webhooks, /api/v1/status, /healthz, /metrics). nullopt:
  // the config file's `listen`, else 127.0.0.1:8080, except with --until-idle
  // and no --config (a one-off batch run needs no server). "off": none.
  std::optional<std::string> listen;
  std::string config;  // --config FILE: watched repositories and pools (agent/triggers/server_config.h)
  // Without `pools:` in the config: one local pool of up to `machines` worker
  // processes with `slots` slots each.
  int machines = 1;
  int fuse_max = 1;  // the local workers' --fuse-max
  std::vector<std::string> env_passthrough;  // the default local pool's env_passthrough
  std::int64_t idle_grace_s = 60;
  std::int64_t scale_interval_ms = 1000;  // autoscaler passes
  bool inproc = false;  // run on this process's own slots; no workers
  // The default local pool's sandbox (agent/runner/sandbox.h) and the
  // directories its runs may write besides their own.
  std::string sandbox = "auto";
  std::vector<std::string> sandbox_writable;
};
// Runs until *stop becomes true (a signal) or, with until_idle, the queue is empty.
Status CmdServe(const ServeOptions& o, const Clock& clock, const std::atomic<bool>& stop);

// `trainq machines` (agent/cli/cmd_machines.cc): machines with state, age, idle
// time, runs done and cost; per-pool billed against busy time.
struct MachinesOptions {
  std::string db;
  bool all = false;      // stopped machines too
  bool batches = false;  // cost per batch
  int batch_limit = 50;  // ... of the newest this many batches (0: all)
  bool json = false;
};
Status CmdMachines(const MachinesOptions& o, const Clock& clock, std::ostream& out);

// `trainq pools reset NAME` (agent/cli/cmd_machines.cc): forgets the pool's
// failed boots, so a `failing` pool boots again (a running serve sees it at
// its next pass).
struct PoolsResetOptions {
  std::string db;
  std::string pool;
};
Status CmdPoolsReset(const PoolsResetOptions& o, const Clock& clock, std::ostream& out);

struct StatusOptions {
  std::string db;
  bool json = false;
  std::string server;  // base URL of a `trainq serve`: read its /api/v1/status instead
  std::string token_file;  // the server's read token (else $TRAINQ_READ_TOKEN)
  // --watch: redraw every `interval_ms` (in place on a terminal) until `stop`
  // is set (SIGINT, SIGTERM) or, with until_idle, nothing is left to run.
  bool watch = false;
  TimeMs interval_ms = 2000;
  bool until_idle = false;
  const std::atomic<bool>* stop = nullptr;
  bool terminal = false;  // draw in place with ANSI escapes (stdout is a tty)
  int rows = 0;           // the terminal's height: a frame is cut to fit (0: not cut)
};
Status CmdStatus(const StatusOptions& o, const Clock& clock, std::ostream& out);

// `trainq show COMMIT` (agent/cli/cmd_show.cc): the commit's batches, why each
// runs, their progress, and the pushes that brought the commit.
struct ShowOptions {
  std::string db;
  std::string commit;  // a revision (HEAD, branch, tag) resolved in `repo`, or a sha prefix
  std::string repo = ".";
  bool json = false;
};
Status CmdShow(const ShowOptions& o, std::ostream& out);

struct RunsOptions {
  std::string db;
  std::optional<std::int64_t> batch;
  std::string state;
  int limit = 0;
  bool json = false;
};
Status CmdRuns(const RunsOptions& o, std::ostream& out);

struct CancelOptions {
  std::string db;
  std::int64_t id = 0;
  bool run = false;  // id names a run, not a batch
  bool json = false;
};
Status CmdCancel(const CancelOptions& o, const Clock& clock, std::ostream& out);

struct RetryOptions {
  std::string db;
  std::int64_t id = 0;
  bool batch = false;  // id names a batch: retry its dead runs
  bool json = false;
  std::string server;      // non-empty: ask this `trainq serve` (POST /api/v1/retry)
  std::string token_file;  // with server: the admin token (else $TRAINQ_ADMIN_TOKEN)
};
Status CmdRetry(const RetryOptions& o, const Clock& clock, std::ostream& out);

struct ReportOptions {
  std::string db;
  bool json = false;
  std::string since;                     // "7d", "24h"; empty: everything
  std::vector<std::string> experiments;  // empty: all
  std::string out_dir;                   // write report files here instead of printing
  std::string formats = "md,html,json,csv";
  std::string server;      // base URL of a `trainq serve`: its GET /api/v1/report, not the db
  std::string token_file;  // the read token for --server (else $TRAINQ_READ_TOKEN)
  int limit = -1;          // newest batches shown; -1: the default (ReportLimit), 0: all
};
Status CmdReport(const ReportOptions& o, const Clock& clock, std::ostream& out);

struct CompareCommandOptions {
  std::string db;
  std::string rev_a;
  std::string rev_b;
  std::string repo = ".";  // resolves branch names; commit ids work without it
  std::vector<std::string> experiments;
  bool json = false;
  std::string correction;  // holm | bh | none; "" = what trainq.yaml says (holm)
};
Status CmdCompare(const CompareCommandOptions& o, std::ostream& out);

struct GateOptions {
  std::string db;
  std::string rev = "HEAD";
  std::string baseline = "main";
  std::string repo = ".";
  std::vector<std::string> experiments;
  bool json = false;
  std::int64_t wait_s = 0;  // poll until every run on both sides ended, at most this long
  std::string server;      // base URL of a `trainq serve`: its GET /api/v1/gate, not the db
  std::string token_file;  // the read token for --server (else $TRAINQ_READ_TOKEN)
  std::string correction;  // holm | bh | none; "" = what trainq.yaml says (holm)
};
// Returns the exit code (agent/results/gate.h): 0 no significant regression, 1 a
// regression, 3 undecided. Errors (exit 2 from main) come back as Error.
Result<int> CmdGate(const GateOptions& o, std::ostream& out);

// `trainq logs RUN [--rank K] [--follow]`: the run's output (every rank's
// for a gang run without --rank, each under a header), from the database's
// data folder or a server's GET /api/v1/logs. --follow prints what is added
// until the run ends (or `stop` is set).
struct LogsOptions {
  std::string db;
  std::int64_t run = 0;
  std::optional<int> rank;
  bool follow = false;
  std::int64_t poll_ms = 500;
  std::string server;
  std::string token_file;
  const std::atomic<bool>* stop = nullptr;
};
Status CmdLogs(const LogsOptions& o, std::ostream& out);

// `trainq dashboard-link --server URL [--admin]`: prints a one-time sign-in
// link to that serve's dashboard (POST /dash/api/login-link with the read or,
// with --admin, the admin token).
struct DashboardLinkOptions {
  std::string server;
  std::string token_file;
  bool admin = false;
  bool json = false;
};
Status CmdDashboardLink(const DashboardLinkOptions& o, std::ostream& out);

// The database when neither --db nor TRAINQ_DB names one: ./trainq.db when it
// exists (setups from before), else UserDbPath(), outside any repository.
std::string DefaultDbPath();
// $XDG_DATA_HOME/trainq/trainq.db, or ~/.local/share/trainq/trainq.db.
std::string UserDbPath();

// The store at `db`, which must exist (agent/cli/cli_common.cc): every command
// but submit, serve and init reads a database, never makes one.
Result<Store> OpenExisting(const std::string& db);

// ---- The command line: each file registers its commands ----------------------

// What every command needs from the `trainq` command line. `db` is read when
// the command runs (after parsing), so the global --db may follow the command.
struct CliContext {
  const std::string* db = nullptr;
  int* exit_code = nullptr;
  const Clock* clock = nullptr;
};

// 0 for success; else prints "trainq: error: MESSAGE" to stderr and returns 1.
int ReportStatus(const Status& st);
// Set by SIGINT or SIGTERM once CatchStopSignals() ran (serve, worker): their
// loops end, stopping what they started.
const std::atomic<bool>& StopFlag();
void CatchStopSignals();
// The exit code for a command line CLI11 refused: 2 with its message (or, for
// an unknown command, one that names it and the known ones); 0 for --help.
int ExitForParseError(CLI::App& app, const CLI::ParseError& e, int argc, char** argv);
// `trainq help [COMMAND [SUBCOMMAND]]` is `trainq [COMMAND [SUBCOMMAND]]
// --help`: the command line rewritten so (unchanged when its first command
// word is not `help`; without --help when a word names no command of `app`,
// so that the parser names it). Global options before `help` stay.
std::vector<std::string> HelpAsOption(const CLI::App& app, int argc, char** argv);
// Registers `help` (done by HelpAsOption before parsing; here so that
// `trainq --help` and the completion list it).
void AddHelpCommand(CLI::App& app);
// A transform for options held in seconds: the durations server.yaml takes
// (90s, 2m, 1h30m; a bare number is seconds), so the CLI and the YAML read
// the same way. A bad one is a usage error (exit 2) naming the option.
CLI::Validator DurationSeconds();
// --server (or $TRAINQ_SERVER) and --token-file: the command asks a running
// `trainq serve` instead of the database, with its read or admin token;
// `more` ends --server's help ("; --repo then names ...").
enum class ServerRole { kRead, kAdmin };
void AddServerOptions(CLI::App* c, std::string* server, std::string* token_file,
                      ServerRole role = ServerRole::kRead, const std::string& more = "");

void AddReproCommand(CLI::App& app, const CliContext& ctx);      // agent/cli/cmd_submit.cc
void AddSubmitCommand(CLI::App& app, const CliContext& ctx);     // agent/cli/cmd_submit.cc
void AddStatusCommand(CLI::App& app, const CliContext& ctx);     // agent/cli/cmd_status.cc
void AddRunsCommand(CLI::App& app, const CliContext& ctx);       // agent/cli/cmd_runs.cc
void AddCancelCommand(CLI::App& app, const CliContext& ctx);     // agent/cli/cmd_runs.cc
void AddRetryCommand(CLI::App& app, const CliContext& ctx);      // agent/cli/cmd_runs.cc
void AddInitCommand(CLI::App& app, const CliContext& ctx);       // agent/cli/cmd_runs.cc
void AddServeCommand(CLI::App& app, const CliContext& ctx);      // agent/cli/cmd_serve.cc
void AddWorkerCommand(CLI::App& app, const CliContext& ctx);     // agent/cli/cmd_worker.cc
void AddMachinesCommands(CLI::App& app, const CliContext& ctx);  // machines, pools reset
void AddShowCommand(CLI::App& app, const CliContext& ctx);       // agent/cli/cmd_show.cc
void AddReportCommand(CLI::App& app, const CliContext& ctx);     // agent/cli/cmd_report.cc
void AddCompareCommands(CLI::App& app, const CliContext& ctx);   // compare, gate
void AddLogsCommand(CLI::App& app, const CliContext& ctx);       // agent/cli/cmd_logs.cc
// `trainq login`, `logout`, `audit` (agent/cli/cmd_login.cc).
void AddLoginCommands(CLI::App& app, const CliContext& ctx);
void AddNotifyCommands(CLI::App& app, const CliContext& ctx);  // agent/cli/cmd_notify.cc
void AddMlflowCommands(CLI::App& app, const CliContext& ctx);  // agent/cli/cmd_mlflow.cc
void AddDashboardLinkCommand(CLI::App& app, const CliContext& ctx);  // agent/cli/cmd_dashboard.cc
// `trainq stats ...`: agent/cli/cmd_stats.cc.
void AddStatsCommands(CLI::App& app, int* exit_code);
// `trainq simulate TRACE`: agent/cli/cmd_simulate.cc.
void AddSimulateCommand(CLI::App& app, int* exit_code);
// `trainq sweep start|status|best|stop|resume`: agent/cli/cmd_sweep.cc.
void AddSweepCommands(CLI::App& app, const std::string* db, int* exit_code);

}  // namespace trainq
