// `trainq report --out DIR`: the weekly spread report as files a CI job keeps.
//
// report.md, report.html (self-contained, inline SVG), report.json and
// runs.csv. Rendering is a pure function of the ReportData, and ReportData a
// pure function of the store's contents, the repositories' branches and the
// options: the same store and history give byte-identical files (no
// generation time is printed; the window is shown as the dates of the
// batches it holds).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/results/analysis.h"
#include "core/result.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

struct ReportEntry {
  BatchProgress batch;
  std::vector<RunRow> runs;
  std::optional<BatchComparison> vs_parent;  // same experiment at the parent commit
  bool spread_grew = false;  // variance up against the previous batch (F-test, p < 0.05)
  double spread_p = 1;
  std::optional<ReproCheck> repro;   // `determinism: check`
  std::optional<std::string> drift;  // "drift: ..." (agent/results/analysis.h)
  // The later commits along the branch whose batch reused these very runs
  // (unchanged inputs): shown here once, not again at each of them.
  std::vector<std::string> reused_at;
};

struct ExperimentReport {
  std::string repo;
  std::string experiment;
  std::string metric;
  std::string goal;
  std::vector<ReportEntry> entries;  // oldest first
};

// A sweep started in the window: its state, winner and plots
// (agent/results/sweep_plot.h).
struct SweepReport {
  std::int64_t id = 0;
  std::string repo, experiment, sha, state, metric, goal;
  int points = 0, budget_points = 0, runs_done = 0, runs_total = 0;
  std::vector<std::string> winner;  // WinnerLines; empty before a point has 2 seeds
  std::vector<std::pair<std::string, double>> importance;  // parameter, eta squared
  std::map<std::string, std::string> plots;                // file name -> SVG
};

struct ReportData {
  std::string window;  // e.g. "7d"
  std::vector<ExperimentReport> experiments;  // by repo, then name
  std::vector<SweepReport> sweeps;            // oldest first
  int batches = 0;
  int runs = 0;
  // The branch each repository's history follows (repo -> branch; absent:
  // its repository could not be read, so every batch in creation order),
  // and how many batches of commits off those branches were left out
  // (unmerged or reverted pull-request heads, other branches).
  std::map<std::string, std::string> branches;
  int off_branch = 0;
};

// How many commits of a branch the report walks back at most.
inline constexpr size_t kReportBranchCommits = 5000;

// Batches created at or after `since` (and, when `experiments` is not empty,
// only those experiments) of the commits on each repository's default
// branch, along its first parents (oldest first): what was merged, not the
// heads of pull requests or other branches. A batch that reused the runs of
// another batch shown is listed once, at the commit that ran them, with the
// commits that reused them (ReportEntry::reused_at). A repository that cannot
// be read (moved; a test's made-up url) keeps every batch, in creation order.
Result<ReportData> BuildReport(Store& store, TimeMs since, const std::string& window,
                               const std::vector<std::string>& experiments);

// The report's experiments (no sweeps) for exactly `batches`, taken as
// oldest first in the order given: each compared with its baseline,
// corrected over its commit's family, with its drift, determinism and spread
// against the one before it. What
// BuildReport does for a window; the dashboard's experiment page does it for
// the one page of a history it shows.
// `reused_at`: by batch id, the commits whose batches reused its runs and
// were left out (ReportEntry::reused_at).
Result<ReportData> ReportOfBatches(
    Store& store, std::vector<BatchProgress> batches, const std::string& window,
    const std::vector<std::string>& experiments,
    const std::map<std::int64_t, std::vector<std::string>>& reused_at = {});

std::string RenderMarkdown(const ReportData& r);
std::string RenderHtml(const ReportData& r);
std::string RenderJson(const ReportData& r);
std::string RenderRunsCsv(const ReportData& r);

// One-sided F-test that `later` has a larger variance than `earlier`: its p-value.
// 1 when either side has fewer than 2 values or a zero variance makes it undefined.
double SpreadGrowthP(const std::vector<double>& earlier, const std::vector<double>& later);

// The --out files in the order they are written.
inline constexpr const char* kReportFileFormats[] = {"md", "html", "json", "csv"};
bool IsReportFileFormat(const std::string& f);
std::string RenderReportFile(const ReportData& data, const std::string& format);
// "12 batches, 120 runs, 3 experiment(s)\n".
std::string ReportSummaryLine(const ReportData& data);
// The start of a "7d" window ending at `now`; 0 for "".
Result<TimeMs> ReportSince(const std::string& since, TimeMs now);

// What `trainq report` prints or writes, as bytes, for one format: "table"
// (`trainq report`), "batches" (`--json`), "md", "html", "json", "csv" (the
// files of `--out`), "summary" (the last line `--out` prints). The CLI and
// GET /api/v1/report both call it, so they answer the same bytes.
struct ReportQuery {
  std::string since;                     // "7d"; empty: everything
  std::vector<std::string> experiments;  // empty: all
  std::string format;
  // "table" and "batches": the newest `limit` batches (0: all). Unset: the
  // table shows kReportTableLimit (a line says when there are older ones),
  // "batches" (JSON) all of them.
  std::optional<int> limit;
};
inline constexpr int kReportTableLimit = 50;
// The limit `q` asks for, its default applied (0: all).
int ReportLimit(const ReportQuery& q);
// A `limit` query parameter: a whole number >= 0, else kInvalidArgument.
Result<int> ParseReportLimit(const std::string& text);
Result<std::string> ReportBytes(Store& store, const ReportQuery& q, TimeMs now);
// kNotFound naming `option` and `where` (the db) when an experiment has no
// batch at all: a misspelt name is an error, not an empty report.
Status CheckReportExperiments(Store& store, const std::vector<std::string>& experiments,
                              const std::string& option, const std::string& where);
// report.md, report.html, report.json, runs.csv; nullptr for other formats.
const char* ReportFileName(const std::string& format);

}  // namespace trainq
