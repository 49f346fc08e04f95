// `trainq serve`: its options, read and checked here, become a Daemon
// (agent/daemon/daemon.h), which answers webhooks and the worker protocol
// over HTTP, turns pushes into batches, and runs the fleet: machines booted
// by each pool's provider run `trainq worker`, which leases runs over HTTP.
// `--inproc` runs the queue on this process's own slots instead (no workers,
// no HTTP needed), the way trainq worked before machines existed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/daemon/daemon.h"
#include "agent/daemon/fleet.h"
#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/repo/git_repo.h"
#include "agent/results/sweep.h"
#include "agent/runner/gpu_detect.h"
#include "agent/runner/run_process.h"
#include "agent/runner/sandbox.h"
#include "agent/runner/worker.h"
#include "agent/triggers/database_config.h"
#include "agent/triggers/push_pipeline.h"
#include "agent/triggers/server_config.h"
#include "cloud/provider.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/postgres_password.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

std::string DataDir(const ServeOptions& o) {
  std::string d = o.data_dir;
  // Beside the SQLite file; with a PostgreSQL store (no file), in the
  // working directory unless --data-dir says where.
  if (d.empty() && sql::IsPostgresUrl(o.db)) d = "trainq-data";
  if (d.empty()) d = (fs::absolute(o.db).parent_path() / "trainq-data").string();
  return fs::absolute(d).string();
}

// The store: --db or TRAINQ_DB (`db_given`), else the config's `database:`
// (its password handed to libpq apart from the URL), else the default file.
// A config that cannot be read is left to LoadServerConfig to report.
void UseConfigDatabase(ServeOptions* o, bool db_given) {
  if (o->config.empty()) return;
  auto database = LoadDatabaseConfig(o->config);
  if (!database || !*database) return;
  const DatabaseConfig& d = **database;
  if (db_given && o->db != d.url) {
    spdlog::warn("{}: database: not used: --db or TRAINQ_DB names {}", o->config,
                 sql::RedactUrl(o->db));
    return;
  }
  o->db = d.url;
  if (!d.password.empty()) {
    sql::SetPostgresPassword(d.password.value);
    spdlog::info("database password from {}", d.password.source);
  }
}

// A free TCP port on 127.0.0.1 (for a listener that only local workers use).
Result<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(ErrorKind::kUnavailable, "socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return Fail(ErrorKind::kUnavailable, "cannot find a free port on 127.0.0.1");
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// What runs of local workers must not see (FleetOptions::sandbox_hide): the
// database and its side files, the config, every path the config names (its
// `{file:}` secrets, tokens, keys, credentials and kubeconfigs, found by one
// walk of the document: ServerConfig::named_paths) and serve's data dir
// (tokens, outbox, other runs).
std::vector<std::string> SandboxHidden(const ServeOptions& o, const ServerConfig& config,
                                       const std::string& data_dir) {
  std::vector<std::string> out;
  if (!sql::IsPostgresUrl(o.db)) {
    std::string db = fs::absolute(o.db).string();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) out.push_back(db + suffix);
  }
  if (!config.path.empty()) out.push_back(fs::absolute(config.path).string());
  out.insert(out.end(), config.named_paths.begin(), config.named_paths.end());
  out.push_back(data_dir);
  return out;
}

// The pool used when the config names none: local worker processes.
PoolSpec DefaultLocalPool(const ServeOptions& o) {
  PoolSpec p;
  p.scaling.name = "local";
  p.scaling.min = 0;
  p.scaling.max = o.machines;  // 0: only workers started by hand
  p.scaling.slots = o.slots;
  p.fuse_max = o.fuse_max;
  p.env_passthrough = o.env_passthrough;
  p.sandbox = o.sandbox;
  p.sandbox_writable = o.sandbox_writable;
  p.scaling.idle_grace_ms = o.idle_grace_s * 1000;
  p.scaling.boot_timeout_ms = 60'000;
  p.provider = "local";
  p.orphan_timeout_ms = 10 * 60'000;
  if (!o.gpus.empty()) {
    p.params["worker_gpus"] = o.gpus;
    p.gpus = static_cast<int>(Split(o.gpus, ',').size());
  }
  return p;
}

// What serve does to its own process before anything else.
void HardenProcess() {
  // Not dumpable: /proc/<serve>/environ, mem and fd links become root's only,
  // and no process of the same user may ptrace this one (its secrets).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Room for the HTTP listener's connections (1,024 at most) beside the
  // database and the workers' pipes: the soft descriptor limit up to the hard.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 &&
                   rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

Status CheckServeFlags(const ServeOptions& o) {
  TRY(CheckSandboxMode(o.sandbox, "--sandbox"));
  if (o.slots <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--slots: expected a positive integer, got " + std::to_string(o.slots));
  }
  if (o.fuse_max <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--fuse-max: expected a positive integer, got " + std::to_string(o.fuse_max));
  }
  if (o.machines < 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--machines: expected 0 (hand-started workers only) or more, got " +
                    std::to_string(o.machines));
  }
  return {};
}

// A local pool's sandbox, probed now with what its runs will hide (a unit
// that forbids namespaces, a container that masks /proc): `sandbox: bwrap`
// that cannot start is an error at start, not a dead run per boot; `auto`
// says here which form runs get. Each worker probes again when it starts.
Status CheckLocalSandboxes(const ServerConfig& config, const std::string& data_dir,
                           const std::vector<std::string>& hide) {
  for (const auto& p : config.pools) {
    if (p.provider != "local") continue;
    const std::string where =
        (config.path.empty() ? "" : config.path + ": ") + "pool " + p.name() + ": ";
    auto bwrap = ResolveSandbox(p.sandbox);
    if (!bwrap) return Fail(ErrorKind::kInvalidArgument, where + bwrap.error().message);
    SandboxConfig sc;
    sc.mode = p.sandbox;
    sc.hide = hide;
    for (const auto& w : p.sandbox_writable) sc.writable.push_back(fs::absolute(w).string());
    auto state = ProbeSandbox(p.sandbox, *bwrap, sc,
                              (fs::path(data_dir) / ("sandbox-probe-" + p.name())).string());
    if (!state) return Fail(ErrorKind::kInvalidArgument, where + state.error().message);
    if (state->form == "none") {
      spdlog::warn(
          "pool {}: runs start without a sandbox ({}): a run can read what serve's user "
          "can read (see docs/deployment.md#security)",
          p.name(), state->note);
    } else if (state->form != "bwrap") {
      spdlog::warn("pool {}: runs start in sandbox form {} ({})", p.name(), state->form,
                   state->note);
    } else {
      spdlog::info("pool {}: runs start in a bwrap sandbox (probed)", p.name());
    }
  }
  return {};
}

// `--inproc`: the one run engine on this process's slots (a Worker on a
// thread of serve, daemon.h); a listener only when asked for (or the config
// names one).
Result<DaemonOptions> InProcessOptions(const ServeOptions& o, std::string listen) {
  DaemonOptions d;
  d.db = o.db;
  d.data_dir = DataDir(o);
  d.until_idle = o.until_idle;
  d.poll_ms = o.poll_ms;
  d.lease_ms = o.lease_s * 1000;
  d.heartbeat_ms = o.heartbeat_s * 1000;
  if (listen == "auto") listen = "off";
  if (listen != "off") { ASSIGN_OR_RETURN(d.address, ParseListenAddress(listen)); }
  d.listen = listen;
  WorkerConfig wc;
  wc.slots = o.slots;
  if (!o.gpus.empty()) { ASSIGN_OR_RETURN(wc.gpus, ResolveGpus(o.gpus)); }
  wc.fuse_max = o.fuse_max;
  wc.kill_grace_ms = o.kill_grace_s * 1000;
  wc.env_passthrough = o.env_passthrough;
  wc.bin_dir = SelfDir();
  wc.sandbox_note = "serve --inproc runs commands without a sandbox, as serve's children";
  d.inproc = std::move(wc);
  return d;
}

// The fleet: a listener that workers reach (a free loopback port for
// "auto"), the config's pools or the default local one, each worker URL and
// local sandbox checked.
Result<DaemonOptions> FleetServeOptions(const ServeOptions& o, ServerConfig& config,
                                        std::string listen) {
  {
    std::error_code ec;
    auto abs = fs::absolute(o.db, ec);
    spdlog::info("database {} (other trainq commands read it with --db or TRAINQ_DB)",
                 sql::IsPostgresUrl(o.db) ? sql::RedactUrl(o.db) : ec ? o.db : abs.string());
  }
  if (listen == "off") {
    return Fail(ErrorKind::kInvalidArgument,
                "--listen off: workers reach the server over HTTP; use --inproc to run on this "
                "process's own slots without a listener");
  }
  if (listen == "auto") {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    listen = "127.0.0.1:" + std::to_string(port);
  }
  ASSIGN_OR_RETURN(auto address, ParseListenAddress(listen));
  if (config.pools.empty()) config.pools.push_back(DefaultLocalPool(o));
  // What workers on this host connect to; remote pools need their own
  // server_url unless serve listens on an address other hosts can reach.
  const std::string default_server_url =
      "http://" + (address.loopback() || address.host == "0.0.0.0"
                       ? "127.0.0.1:" + std::to_string(address.port)
                       : listen);
  TRY(CheckWorkerUrls(config, default_server_url, listen));

  DaemonOptions d;
  d.db = o.db;
  d.data_dir = DataDir(o);
  d.address = address;
  d.listen = listen;
  d.until_idle = o.until_idle;
  d.poll_ms = o.poll_ms;
  d.scale_interval_ms = o.scale_interval_ms;
  d.lease_ms = o.lease_s * 1000;
  d.heartbeat_ms = o.heartbeat_s * 1000;
  d.fleet.server_url = default_server_url;
  d.fleet.trainq_path = (fs::path(SelfDir()) / "trainq").string();
  d.fleet.data_dir = d.data_dir;
  d.fleet.sandbox_hide = SandboxHidden(o, config, d.data_dir);
  TRY(CheckLocalSandboxes(config, d.data_dir, d.fleet.sandbox_hide));
  d.fleet.budget = config.budget;
  return d;
}

}  // namespace

Status CmdServe(const ServeOptions& o, const Clock& clock, const std::atomic<bool>& stop) {
  HardenProcess();
  TRY(CheckServeFlags(o));
  ServerConfig config;
  if (!o.config.empty()) { ASSIGN_OR_RETURN(config, LoadServerConfig(o.config)); }
  std::string listen = o.listen                ? *o.listen
                       : !config.listen.empty() ? config.listen
                       : o.until_idle && o.config.empty() ? "auto"
                                                          : "127.0.0.1:8080";
  ASSIGN_OR_RETURN(auto options, o.inproc ? InProcessOptions(o, listen)
                                          : FleetServeOptions(o, config, listen));
  ASSIGN_OR_RETURN(auto daemon, Daemon::Open(std::move(config), std::move(options), clock));
  return daemon->Run(stop);
}


// `trainq serve`.
void AddServeCommand(CLI::App& app, const CliContext& ctx) {
  // serve
  auto serve = std::make_shared<ServeOptions>();
  auto* c_serve = app.add_subcommand(
      "serve", "The daemon: webhooks, the worker API, and machines that run the queue");
  c_serve->add_option("--slots", serve->slots,
                      "Runs at once per machine of the default local pool")
      ->capture_default_str();
  c_serve->add_option("--machines", serve->machines,
                      "Most worker processes the default local pool starts (0: only workers started by hand)")
      ->capture_default_str();
  c_serve->add_option("--env-passthrough", serve->env_passthrough,
                      "A variable of serve's environment that runs of the default local pool also "
                      "get (NAME or PREFIX*; repeatable)")
      ->delimiter(',');
  c_serve->add_option("--fuse-max", serve->fuse_max,
                      "Seeds of a trainer: experiment that a worker of the default local pool fuses into one "
                      "trainq-train process")
      ->capture_default_str();
  c_serve->add_option("--idle-grace", serve->idle_grace_s,
                      "How long a machine of the default local pool may idle before it is "
                      "stopped (90s, 2m; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--sandbox", serve->sandbox,
                      "Where runs of the default local pool start: bwrap, none, or auto (bwrap "
                      "when installed); see docs/deployment.md#security")
      ->capture_default_str();
  c_serve->add_option("--sandbox-writable", serve->sandbox_writable,
                      "A directory runs of the default local pool may write besides their own "
                      "(repeatable)");
  c_serve->add_flag("--inproc", serve->inproc,
                    "Run on this process's own slots: no workers, no machines");
  c_serve->add_flag("--until-idle", serve->until_idle, "Exit once the queue is empty");
  c_serve->add_option("--data-dir", serve->data_dir,
                      "Run logs, metrics and checkouts (default: trainq-data next to the db)");
  c_serve->add_option("--gpus", serve->gpus, "GPU ids to hand out, e.g. 0,1 (CUDA_VISIBLE_DEVICES)");
  c_serve->add_option("--lease", serve->lease_s, "Lease length (60s, 2m; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--heartbeat", serve->heartbeat_s,
                      "Heartbeat interval (10s; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--poll-ms", serve->poll_ms, "Queue poll interval in milliseconds")
      ->capture_default_str();
  c_serve->add_option("--kill-grace", serve->kill_grace_s,
                      "Time between SIGTERM and SIGKILL when a run is stopped (10s; a bare "
                      "number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--listen", serve->listen,
                      "HTTP server address HOST:PORT, or off with --inproc (default: the config's, "
                      "else 127.0.0.1:8080; a free loopback port with --until-idle and no "
                      "--config)");
  c_serve->add_option("--config", serve->config,
                      "Server config (YAML): watched repositories, webhook secrets, polling, "
                      "commit statuses");
  c_serve->callback([=] {
    serve->db = *ctx.db;
    const char* env_db = std::getenv("TRAINQ_DB");
    UseConfigDatabase(
        serve.get(), c_serve->get_parent()->get_option("--db")->count() > 0 || (env_db && *env_db));
    CatchStopSignals();
    *ctx.exit_code = ReportStatus(CmdServe(*serve, *ctx.clock, StopFlag()));
  });
}

}  // namespace trainq
