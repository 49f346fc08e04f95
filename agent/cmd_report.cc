// `trainq report`: per batch n, mean, sd, min and max on the terminal, or the
// full spread report as files (--out DIR) for a CI job to keep. With --server,
// the same bytes come from a `trainq serve`'s GET /api/v1/report.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "agent/commands.h"
#include "agent/read_api.h"
#include "agent/report.h"
#include "agent/table.h"
#include "core/strings.h"
#include "queue/store.h"
#include "stats/summary.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

// The --out files in the order they are written.
constexpr const char* kFileFormats[] = {"md", "html", "json", "csv"};

bool IsFileFormat(const std::string& f) {
  for (const char* k : kFileFormats) {
    if (f == k) return true;
  }
  return false;
}

std::string RenderFile(const ReportData& data, const std::string& format) {
  if (format == "md") return RenderMarkdown(data);
  if (format == "html") return RenderHtml(data);
  if (format == "json") return RenderJson(data);
  return RenderRunsCsv(data);
}

std::string SummaryLine(const ReportData& data) {
  std::ostringstream s;
  s << data.batches << " batches, " << data.runs << " runs, " << data.experiments.size()
    << " experiment(s)\n";
  return s.str();
}

Result<TimeMs> SinceMs(const std::string& since, TimeMs now) {
  if (since.empty()) return TimeMs{0};
  auto d = ParseDurationSeconds(since);
  if (!d) return Fail(ErrorKind::kInvalidArgument, "since: " + d.error().message);
  return now - *d * 1000;
}

Result<std::set<std::string>> ParseFormats(const std::string& list) {
  std::set<std::string> formats;
  for (const auto& f : Split(list, ',')) {
    std::string t(Trim(f));
    if (t.empty()) continue;
    if (!IsFileFormat(t)) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--format: unknown format '" + t + "' (md, html, json, csv)");
    }
    formats.insert(t);
  }
  return formats;
}

std::string TableText(std::vector<BatchProgress> batches, const std::string& since) {
  if (batches.empty()) return "no batches" + (since.empty() ? "" : " in the last " + since) + "\n";
  Table t({"BATCH", "COMMIT", "EXPERIMENT", "METRIC", "N", "MEAN", "SD", "MIN", "MAX", "RUNS"});
  for (const auto& b : batches) {
    auto s = stats::Summarize(b.values);
    auto num = [&](double v) { return s.n ? FormatDouble(v, 4) : std::string("-"); };
    t.Add({std::to_string(b.id), b.sha.substr(0, 7), b.experiment,
           b.metric_name + (b.metric_goal == "max" ? " ↑" : " ↓"), std::to_string(s.n),
           num(s.mean), s.n > 1 ? FormatDouble(s.sd, 4) : "-", num(s.min), num(s.max),
           ProgressText(b)});
  }
  return t.Render();
}

}  // namespace

Status CheckReportExperiments(Store& store, const std::vector<std::string>& experiments,
                              const std::string& option, const std::string& where) {
  if (experiments.empty()) return {};
  // A misspelt name is an error, not an empty report.
  ASSIGN_OR_RETURN(auto all, store.Batches(false, 0));
  std::set<std::string> known;
  for (const auto& b : all) known.insert(b.experiment);
  for (const auto& e : experiments) {
    if (known.count(e)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return Fail(ErrorKind::kNotFound, option + ": no batch of experiment '" + e + "' in " + where +
                                          (list.empty() ? "" : " (known: " + list + ")"));
  }
  return {};
}

const char* ReportFileName(const std::string& format) {
  if (format == "md") return "report.md";
  if (format == "html") return "report.html";
  if (format == "json") return "report.json";
  if (format == "csv") return "runs.csv";
  return nullptr;
}

Result<std::string> ReportBytes(Store& store, const ReportQuery& q, TimeMs now) {
  ASSIGN_OR_RETURN(TimeMs since, SinceMs(q.since, now));
  if (IsFileFormat(q.format) || q.format == "summary") {
    ASSIGN_OR_RETURN(auto data,
                     BuildReport(store, since, q.since.empty() ? "all" : q.since, q.experiments));
    return q.format == "summary" ? SummaryLine(data) : RenderFile(data, q.format);
  }
  if (q.format != "table" && q.format != "batches") {
    return Fail(ErrorKind::kInvalidArgument,
                "format: unknown format '" + q.format +
                    "' (md, html, json, csv, summary, table, batches)");
  }
  ASSIGN_OR_RETURN(auto batches, store.BatchesSince(since));
  std::set<std::string> wanted(q.experiments.begin(), q.experiments.end());
  std::erase_if(batches, [&](const BatchProgress& b) {
    return !wanted.empty() && !wanted.count(b.experiment);
  });
  if (q.format == "batches") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& b : batches) j.push_back(BatchJson(b));
    return j.dump(2) + "\n";
  }
  return TableText(std::move(batches), q.since);
}

Status CmdReport(const ReportOptions& o, const Clock& clock, std::ostream& out) {
  if (!o.since.empty()) {
    if (auto d = ParseDurationSeconds(o.since); !d) {
      return Fail(ErrorKind::kInvalidArgument, "--since: " + d.error().message);
    }
  }
  ASSIGN_OR_RETURN(auto formats, ParseFormats(o.formats));
  ReportQuery q{o.since, o.experiments, ""};

  // Where the bytes come from: the store, or the server's read route.
  std::optional<Store> store;
  std::optional<ReadClient> server;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadToken(o.token_file));
    server.emplace(o.server, token);
  } else {
    StoreOptions so;
    so.create = false;
    ASSIGN_OR_RETURN(auto s, Store::Open(o.db, so));
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
      ASSIGN_OR_RETURN(TimeMs since, SinceMs(o.since, clock.Now()));
      ASSIGN_OR_RETURN(data, BuildReport(*store, since, o.since.empty() ? "all" : o.since,
                                         o.experiments));
    }
    for (const char* format : kFileFormats) {
      if (!formats.count(format)) continue;
      std::string bytes;
      if (data) {
        bytes = RenderFile(*data, format);
      } else {
        ASSIGN_OR_RETURN(bytes, fetch(format));
      }
      std::string path = (fs::path(o.out_dir) / ReportFileName(format)).string();
      TRY(WriteFile(path, bytes));
      out << "wrote " << path << "\n";
    }
    if (data) {
      out << SummaryLine(*data);
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

}  // namespace trainq
