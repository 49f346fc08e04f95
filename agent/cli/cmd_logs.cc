// `trainq logs RUN [--rank K] [--follow] [--server URL]`.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "agent/cli/cli.h"
#include "agent/cli/read_client.h"
#include "agent/results/run_logs.h"
#include "queue/store.h"

namespace trainq {

namespace {

constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // bounded memory, any log size

// One source of log pieces: the local store or a server.
struct LogSource {
  std::optional<Store> store;
  std::optional<ReadClient> client;

  Result<RemoteLogChunk> Read(std::int64_t run, std::optional<int> rank, std::int64_t offset) {
    if (client) return client->Logs(run, rank, offset);
    ASSIGN_OR_RETURN(auto c, ReadRunLog(*store, run, rank, offset, kChunk));
    if (c.archived && offset == 0) {
      // Said once, on stderr: stdout stays the log's own bytes.
      std::cerr << "trainq logs: run " << run << (rank ? " rank " + std::to_string(*rank) : "")
                << ": reading the archive retention made (" << c.path << ")\n";
    }
    RemoteLogChunk r{std::move(c.bytes), c.next_offset, c.run_ended, {}};
    ASSIGN_OR_RETURN(auto files, RunLogFiles(*store, run));
    for (const auto& f : files) {
      if (f.rank) r.ranks.push_back(*f.rank);
    }
    return r;
  }
};

// Prints the log from `offset` to its current end; returns the new offset.
Result<RemoteLogChunk> Drain(LogSource& src, std::int64_t run, std::optional<int> rank,
                             std::int64_t offset, std::ostream& out) {
  while (true) {
    ASSIGN_OR_RETURN(auto c, src.Read(run, rank, offset));
    out << c.bytes;
    offset = c.next_offset;
    if (c.bytes.empty()) return c;
  }
}

}  // namespace

Status CmdLogs(const LogsOptions& o, std::ostream& out) {
  LogSource src;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadToken(o.token_file, o.server));
    src.client.emplace(o.server, token);
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    src.store.emplace(std::move(store));
  }
  // A gang run without --rank: every rank's log, each under a header.
  ASSIGN_OR_RETURN(auto first, src.Read(o.run, o.rank, 0));
  if (!o.rank && !first.ranks.empty() && !o.follow) {
    for (int k : first.ranks) {
      out << "==> run " << o.run << " rank " << k << " <==\n";
      ASSIGN_OR_RETURN(auto end, Drain(src, o.run, k, 0, out));
      (void)end;
    }
    return {};
  }
  std::int64_t offset = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto c, Drain(src, o.run, o.rank, offset, out));
    offset = c.next_offset;
    out.flush();
    if (!o.follow || c.run_ended || (o.stop && o.stop->load())) {
      // One last read: what was written between the drain and the end.
      if (o.follow && c.run_ended) {
        ASSIGN_OR_RETURN(auto rest, Drain(src, o.run, o.rank, offset, out));
        (void)rest;
      }
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
  }
}

void AddLogsCommand(CLI::App& app, const CliContext& ctx) {
  auto logs = std::make_shared<LogsOptions>();
  auto* c = app.add_subcommand("logs", "A run's output (each rank's for a gang run)");
  c->add_option("RUN", logs->run, "Run id (see `trainq runs`)")->required();
  c->add_option("--rank", logs->rank, "Only this rank of a gang run");
  c->add_flag("--follow,-f", logs->follow, "Keep printing what the run writes until it ends");
  AddServerOptions(c, &logs->server, &logs->token_file);
  c->callback([=] {
    logs->db = *ctx.db;
    if (logs->follow) {
      CatchStopSignals();
      logs->stop = &StopFlag();
    }
    *ctx.exit_code = ReportStatus(CmdLogs(*logs, std::cout));
  });
}

}  // namespace trainq
