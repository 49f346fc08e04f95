// trainq: the daemon, the worker and the user commands in one binary. Each
// command is registered by its file in agent/cli/ (agent/cli/cli.h).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "agent/cli/cli.h"
#include "agent/cli/cmd_db.h"
#include "core/fatal_signals.h"
#include "core/log.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  // Fatal signals are logged (and serve's local workers stopped); SIGXFSZ is
  // ignored, so that a write past `ulimit -f` fails with EFBIG and is reported.
  trainq::InstallFatalSignalHandlers();
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
                     "~/.local/share/trainq/trainq.db), or a PostgreSQL database's "
                     "postgres://USER@HOST:PORT/DB URL (docs/deployment.md)")
          ->capture_default_str();
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");
  app.add_flag("-q,--quiet", quiet, "Only warnings and errors in the log");
  int exit_code = 0;
  const trainq::CliContext ctx{&db, &exit_code, &trainq::SystemClock::Get()};

  trainq::AddReproCommand(app, ctx);
  trainq::AddSubmitCommand(app, ctx);
  trainq::AddStatusCommand(app, ctx);
  trainq::AddRunsCommand(app, ctx);
  trainq::AddCancelCommand(app, ctx);
  trainq::AddRetryCommand(app, ctx);
  trainq::AddInitCommand(app, ctx);
  trainq::AddServeCommand(app, ctx);
  trainq::AddMachinesCommands(app, ctx);
  trainq::AddShowCommand(app, ctx);
  trainq::AddReportCommand(app, ctx);
  trainq::AddCompareCommands(app, ctx);
  trainq::AddLogsCommand(app, ctx);
  trainq::AddDashboardLinkCommand(app, ctx);
  trainq::AddDbCommands(app, ctx);
  trainq::AddLoginCommands(app, ctx);
  trainq::AddNotifyCommands(app, ctx);
  trainq::AddMlflowCommands(app, ctx);
  trainq::AddWorkerCommand(app, ctx);
  trainq::AddStatsCommands(app, &exit_code);
  trainq::AddSweepCommands(app, &db, &exit_code);
  trainq::AddSimulateCommand(app, &exit_code);
  trainq::AddHelpCommand(app);

  // The per-user default database: its folder is made on first use, and its
  // creation said once.
  bool user_db_new = false;
  app.parse_complete_callback([&] {
    trainq::InitLogging(verbosity, quiet);
    if (db_option->count() == 0 && db == trainq::UserDbPath()) {
      std::error_code ec;
      user_db_new = !fs::exists(db, ec);
      if (user_db_new) fs::create_directories(fs::path(db).parent_path(), ec);
    }
  });
  // `trainq help [COMMAND]` is `trainq [COMMAND] --help`.
  std::vector<std::string> args = trainq::HelpAsOption(app, argc, argv);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  const int cargc = static_cast<int>(cargs.size());
  cargs.push_back(nullptr);
  try {
    app.parse(cargc, cargs.data());
  } catch (const CLI::ParseError& e) {
    return trainq::ExitForParseError(app, e, cargc, cargs.data());
  }
  std::error_code ec;
  if (user_db_new && fs::exists(db, ec)) {
    std::cerr << "trainq: created " << db << " (state of every trainq command; set TRAINQ_DB or "
              << "--db to keep it elsewhere)\n";
  }
  return exit_code;
}
