// `trainq report`: per batch n, mean, sd, min and max on the terminal, or the
// full spread report as files (--out DIR) for a CI job to keep. With --server,
// the same bytes come from a `trainq serve`'s GET /api/v1/report.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "agent/cli/cli.h"
#include "agent/cli/read_client.h"
#include "agent/results/report.h"
#include "agent/results/table.h"
#include "core/strings.h"
#include "queue/store.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

Result<std::set<std::string>> ParseFormats(const std::string& list) {
  std::set<std::string> formats;
  for (const auto& f : Split(list, ',')) {
    std::string t(Trim(f));
    if (t.empty()) continue;
    if (!IsReportFileFormat(t)) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--format: unknown format '" + t + "' (md, html, json, csv)");
    }
    formats.insert(t);
  }
  return formats;
}

}  // namespace


Status CmdReport(const ReportOptions& o, const Clock& clock, std::ostream& out) {
  if (!o.since.empty()) {
    if (auto d = ParseDurationSeconds(o.since); !d) {
      return Fail(ErrorKind::kInvalidArgument, "--since: " + d.error().message);
    }
  }
  ASSIGN_OR_RETURN(auto formats, ParseFormats(o.formats));
  ReportQuery q{o.since, o.experiments, "", std::nullopt};
  if (o.limit >= 0) q.limit = o.limit;

  // Where the bytes come from: the store, or the server's read route.
  std::optional<Store> store;
  std::optional<ReadClient> server;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadToken(o.token_file, o.server));
    server.emplace(o.server, token);
  } else {
    ASSIGN_OR_RETURN(auto s, OpenExisting(o.db));
    store.emplace(std::move(s));
    TRY(CheckReportExperiments(*store, o.experiments, "--experiment", o.db));
  }
  auto fetch = [&](const std::string& format) -> Result<std::string> {
    q.format = format;
    if (server) return server->Report(q);
    return ReportBytes(*store, q, clock.Now());
  };

  if (!o.out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec) return Fail(ErrorKind::kIo, o.out_dir + ": " + ec.message());
    // Locally the report is built once for every file; a server builds it per
    // request (the same bytes for the same store).
    std::optional<ReportData> data;
    if (store) {
      ASSIGN_OR_RETURN(TimeMs since, ReportSince(o.since, clock.Now()));
      ASSIGN_OR_RETURN(data, BuildReport(*store, since, o.since.empty() ? "all" : o.since,
                                         o.experiments));
    }
    for (const char* format : kReportFileFormats) {
      if (!formats.count(format)) continue;
      std::string bytes;
      if (data) {
        bytes = RenderReportFile(*data, format);
      } else {
        ASSIGN_OR_RETURN(bytes, fetch(format));
      }
      std::string path = (fs::path(o.out_dir) / ReportFileName(format)).string();
      TRY(WriteFile(path, bytes));
      out << "wrote " << path << "\n";
    }
    if (data) {
      out << ReportSummaryLine(*data);
    } else {
      ASSIGN_OR_RETURN(auto line, fetch("summary"));
      out << line;
    }
    return {};
  }
  ASSIGN_OR_RETURN(auto bytes, fetch(o.json ? "batches" : "table"));
  out << bytes;
  return {};
}

// `trainq report`.
void AddReportCommand(CLI::App& app, const CliContext& ctx) {
  // report
  auto report = std::make_shared<ReportOptions>();
  auto* c_report = app.add_subcommand(
      "report", "Per batch n, mean, sd, min, max; with --out, the spread report as files");
  c_report->add_option("--since", report->since, "Only batches queued in this window, e.g. 7d");
  c_report->add_option("--experiment,-e", report->experiments, "Only this experiment (repeatable)");
  c_report->add_option("--out", report->out_dir,
                       "Write report.md, report.html, report.json and runs.csv here");
  c_report->add_option("--format", report->formats, "Files to write with --out")
      ->capture_default_str();
  c_report->add_flag("--json", report->json, "Print as JSON (without --out)");
  c_report->add_option("--limit", report->limit,
                       "Newest batches listed (default 50 in the table, all with --json; 0: all)")
      ->check(CLI::NonNegativeNumber);
  AddServerOptions(c_report, &report->server, &report->token_file);
  c_report->callback([=] {
    report->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdReport(*report, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
