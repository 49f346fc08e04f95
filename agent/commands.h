// The user commands of the `trainq` binary. Each takes its options and writes
// to `out`; errors come back as Error (main prints them and exits non-zero).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace CLI {
class App;
}

namespace trainq {

struct SubmitOptions {
  std::string db;
  std::string repo = ".";
  std::string commit = "HEAD";
  std::vector<std::string> experiments;  // empty: all
  std::optional<int> repeats;
  bool json = false;
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
};
// Runs until *stop becomes true (a signal) or, with until_idle, the queue is empty.
Status CmdServe(const ServeOptions& o, const Clock& clock, const std::atomic<bool>& stop);

struct StatusOptions {
  std::string db;
  bool json = false;
};
Status CmdStatus(const StatusOptions& o, const Clock& clock, std::ostream& out);

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
};
Status CmdCancel(const CancelOptions& o, const Clock& clock, std::ostream& out);

struct ReportOptions {
  std::string db;
  bool json = false;
};
Status CmdReport(const ReportOptions& o, std::ostream& out);

// Where the database is: --db, else $TRAINQ_DB, else ./trainq.db.
std::string DefaultDbPath();

// `trainq stats ...`: registered by agent/cmd_stats.cc.
void AddStatsCommands(CLI::App& app, int* exit_code);

}  // namespace trainq
