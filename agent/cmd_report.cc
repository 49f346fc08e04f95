// `trainq report`: per batch n, mean, sd, min and max on the terminal, or the
// full spread report as files (--out DIR) for a CI job to keep.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "agent/commands.h"
#include "agent/report.h"
#include "agent/table.h"
#include "core/strings.h"
#include "queue/store.h"
#include "stats/summary.h"

namespace fs = std::filesystem;

namespace trainq {

Status CmdReport(const ReportOptions& o, const Clock& clock, std::ostream& out) {
  TimeMs since = 0;
  if (!o.since.empty()) {
    auto d = ParseDurationSeconds(o.since);
    if (!d) return Fail(ErrorKind::kInvalidArgument, "--since: " + d.error().message);
    since = clock.Now() - *d * 1000;
  }
  std::set<std::string> formats;
  for (const auto& f : Split(o.formats, ',')) {
    std::string t(Trim(f));
    if (t.empty()) continue;
    if (t != "md" && t != "html" && t != "json" && t != "csv") {
      return Fail(ErrorKind::kInvalidArgument,
                  "--format: unknown format '" + t + "' (md, html, json, csv)");
    }
    formats.insert(t);
  }
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  if (!o.experiments.empty()) {
    // A misspelt name is an error, not an empty report.
    ASSIGN_OR_RETURN(auto all, store.Batches(false, 0));
    std::set<std::string> known;
    for (const auto& b : all) known.insert(b.experiment);
    for (const auto& e : o.experiments) {
      if (known.count(e)) continue;
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Fail(ErrorKind::kNotFound, "--experiment: no batch of experiment '" + e +
                                            "' in " + o.db +
                                            (list.empty() ? "" : " (known: " + list + ")"));
    }
  }

  if (!o.out_dir.empty()) {
    ASSIGN_OR_RETURN(auto data, BuildReport(store, since, o.since.empty() ? "all" : o.since,
                                            o.experiments));
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec) return Fail(ErrorKind::kIo, o.out_dir + ": " + ec.message());
    struct File {
      const char* format;
      const char* name;
      std::string (*render)(const ReportData&);
    };
    const File files[] = {{"md", "report.md", RenderMarkdown},
                          {"html", "report.html", RenderHtml},
                          {"json", "report.json", RenderJson},
                          {"csv", "runs.csv", RenderRunsCsv}};
    for (const auto& f : files) {
      if (!formats.count(f.format)) continue;
      std::string path = (fs::path(o.out_dir) / f.name).string();
      TRY(WriteFile(path, f.render(data)));
      out << "wrote " << path << "\n";
    }
    out << data.batches << " batches, " << data.runs << " runs, " << data.experiments.size()
        << " experiment(s)\n";
    return {};
  }

  ASSIGN_OR_RETURN(auto batches, store.BatchesSince(since));
  std::set<std::string> wanted(o.experiments.begin(), o.experiments.end());
  std::erase_if(batches, [&](const BatchProgress& b) {
    return !wanted.empty() && !wanted.count(b.experiment);
  });
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& b : batches) j.push_back(BatchJson(b));
    out << j.dump(2) << "\n";
    return {};
  }
  if (batches.empty()) {
    out << "no batches" << (o.since.empty() ? "" : " in the last " + o.since) << "\n";
    return {};
  }
  Table t({"BATCH", "COMMIT", "EXPERIMENT", "METRIC", "N", "MEAN", "SD", "MIN", "MAX", "RUNS"});
  for (const auto& b : batches) {
    auto s = stats::Summarize(b.values);
    auto num = [&](double v) { return s.n ? FormatDouble(v, 4) : std::string("-"); };
    t.Add({std::to_string(b.id), b.sha.substr(0, 7), b.experiment,
           b.metric_name + (b.metric_goal == "max" ? " ↑" : " ↓"), std::to_string(s.n),
           num(s.mean), s.n > 1 ? FormatDouble(s.sd, 4) : "-", num(s.min), num(s.max),
           ProgressText(b)});
  }
  out << t.Render();
  return {};
}

}  // namespace trainq
