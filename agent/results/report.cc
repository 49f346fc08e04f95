#include "agent/results/report.h"

#include "agent/results/axis_ticks.h"
#include "agent/results/palette.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/table.h"
#include "agent/results/status.h"
#include "agent/results/sweep.h"
#include "agent/results/sweep_plot.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>
#include <sstream>

#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sweeps.h"
#include "stats/summary.h"

namespace trainq {

namespace {

using nlohmann::json;


std::string Date(TimeMs ms) { return FormatTimestamp(ms).substr(0, 10); }

std::string Md(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string Csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string Num(double v, int p = 4) { return FormatDouble(v, p); }

bool Significant(const ReportEntry& e) {
  return e.vs_parent && (e.vs_parent->verdict == stats::Verdict::kBetter ||
                         e.vs_parent->verdict == stats::Verdict::kWorse);
}

std::string VerdictText(const ReportEntry& e);

std::string VerdictOf(const ReportEntry& e) {
  std::string checks;
  if (e.repro) checks += "; " + e.repro->text;
  if (e.drift) checks += "; " + *e.drift;
  if (!e.reused_at.empty()) {
    checks += "; reused unchanged at";
    for (const auto& sha : e.reused_at) checks += " " + ShortSha(sha, kReportShaChars);
  }
  if (e.batch.reuses_batch_id) {
    checks += "; reuses batch " + std::to_string(*e.batch.reuses_batch_id) + " of " +
              ShortSha(e.batch.reused_from_sha, kReportShaChars);
  }
  if (!e.vs_parent) return "no baseline runs" + checks;
  return VerdictText(e) + checks;
}

std::string VerdictText(const ReportEntry& e) {
  std::string text = VerdictWord(*e.vs_parent);
  // In a family: which correction, and the raw p beside the adjusted one.
  if (!CorrectionText(*e.vs_parent).empty() && e.vs_parent->p_raw) {
    text += " (" + PText(*e.vs_parent) + ")";
  }
  if (auto advice = RunsNeededText(*e.vs_parent); !advice.empty()) text += "; " + advice;
  if (!e.vs_parent->unchanged) text += "; " + CostText(*e.vs_parent);
  if (!e.vs_parent->pairing_note.empty()) text += "; unpaired: " + e.vs_parent->pairing_note;
  return text;
}

// Which history the report follows: "Along main (first parents): ...".
std::string BranchNote(const ReportData& r) {
  std::string text;
  if (r.branches.empty()) {
    text = "In the order the batches were made (no repository could be read for its branches).";
  } else {
    std::set<std::string> names;
    for (const auto& [repo, branch] : r.branches) names.insert(branch);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    text = "Along " + list + " (first parents, oldest first): what was merged";
    if (r.off_branch > 0) {
      text += "; " + std::to_string(r.off_branch) + " batch" + (r.off_branch == 1 ? "" : "es") +
              " of commits off the branch (pull-request heads, other branches) not shown";
    }
    text += ". A batch whose runs a later commit reused is shown once, where it ran.";
  }
  return text;
}

std::string CiText(const stats::Summary& s) {
  if (!s.ci95) return "n/a (n<2)";
  return Num(s.ci95->lo) + " .. " + Num(s.ci95->hi);
}

std::string DiffText(const ReportEntry& e) {
  if (!e.vs_parent || !e.vs_parent->cmp) return "-";
  std::string d = Num(e.vs_parent->cmp->diff);
  if (e.vs_parent->cmp->diff >= 0) d = "+" + d;
  return d;
}

}  // namespace

namespace {

// " (floor 0.0047, sd at it)" beside the sd, when the runs reported
// eval_examples; "" otherwise.
std::string FloorCell(const BatchProgress& b) {
  auto f = NoiseFloorJson(b);
  if (!f.is_object() || !f["floor"].is_number()) return "";
  return " (" + f["short"].get<std::string>() + ")";
}

}  // namespace

double SpreadGrowthP(const std::vector<double>& earlier, const std::vector<double>& later) {
  if (earlier.size() < 2 || later.size() < 2) return 1;
  auto a = stats::Summarize(earlier), b = stats::Summarize(later);
  if (a.sd <= 0 || b.sd <= 0) return 1;
  double f = (b.sd * b.sd) / (a.sd * a.sd);
  boost::math::fisher_f dist(static_cast<double>(b.n - 1), static_cast<double>(a.n - 1));
  return boost::math::cdf(boost::math::complement(dist, f));
}

namespace {

// Keeps the batches of commits on their repository's default branch, ordered
// along its first parents (oldest first; creation order at one commit), and
// drops a batch that reuses the runs of another batch kept (noting its commit
// in `reused_at`). A repository that cannot be read keeps all its batches.
std::vector<BatchProgress> AlongBranches(std::vector<BatchProgress> batches, ReportData& r,
                                         std::map<std::int64_t, std::vector<std::string>>& reused_at) {
  std::map<std::string, std::optional<std::unordered_map<std::string, size_t>>> lines;
  for (const auto& b : batches) {
    if (lines.count(b.repo_url)) continue;
    auto& line = lines[b.repo_url];
    auto repo = GitRepo::Open(b.repo_url);
    if (!repo) continue;
    std::string branch = repo->DefaultBranch();
    if (branch.empty()) continue;
    auto shas = repo->FirstParents(branch, kReportBranchCommits);
    if (!shas) continue;
    line.emplace();
    for (size_t i = 0; i < shas->size(); ++i) (*line)[(*shas)[shas->size() - 1 - i]] = i;
    r.branches[b.repo] = branch;
  }
  std::vector<std::pair<size_t, BatchProgress>> kept;
  for (auto& b : batches) {
    const auto& line = lines[b.repo_url];
    size_t pos = 0;
    if (line) {
      auto it = line->find(b.sha);
      if (it == line->end()) {
        ++r.off_branch;
        continue;
      }
      pos = it->second;
    }
    kept.emplace_back(pos, std::move(b));
  }
  // Along the branch; at one commit, in the order they were made.
  std::stable_sort(kept.begin(), kept.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::set<std::int64_t> ids;
  for (const auto& [pos, b] : kept) ids.insert(b.id);
  std::vector<BatchProgress> out;
  for (auto& [pos, b] : kept) {
    if (b.reuses_batch_id && ids.count(*b.reuses_batch_id)) {
      reused_at[*b.reuses_batch_id].push_back(b.sha);
      continue;
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

Result<ReportData> BuildReport(Store& store, TimeMs since, const std::string& window,
                               const std::vector<std::string>& experiments) {
  ASSIGN_OR_RETURN(auto batches, store.runs().BatchesSince(since));
  // Oldest first within an experiment: by creation time, then batch id.
  std::sort(batches.begin(), batches.end(), [](const BatchProgress& x, const BatchProgress& y) {
    return std::tie(x.created_ms, x.id) < std::tie(y.created_ms, y.id);
  });
  ReportData along;
  std::map<std::int64_t, std::vector<std::string>> reused_at;
  batches = AlongBranches(std::move(batches), along, reused_at);
  ASSIGN_OR_RETURN(auto r,
                   ReportOfBatches(store, std::move(batches), window, experiments, reused_at));
  r.branches = std::move(along.branches);
  r.off_branch = along.off_branch;
  std::set<std::string> wanted(experiments.begin(), experiments.end());
  ASSIGN_OR_RETURN(auto sweeps, store.sweeps().List());
  std::reverse(sweeps.begin(), sweeps.end());  // oldest first
  for (const auto& row : sweeps) {
    if (row.created_ms < since) continue;
    if (!wanted.empty() && !wanted.count(row.experiment)) continue;
    ASSIGN_OR_RETURN(auto v, LoadSweepView(store, row.id));
    SweepReport sr;
    sr.id = row.id;
    sr.repo = row.repo_url;
    for (const auto& p : v.points) {
      if (p.batch) {
        sr.repo = p.batch->repo;
        break;
      }
    }
    sr.experiment = row.experiment;
    sr.sha = json::parse(row.commit_json).value("sha", "");
    sr.state = row.state;
    sr.metric = v.metric;
    sr.goal = v.goal;
    sr.points = static_cast<int>(v.points.size());
    sr.budget_points = v.budget_points;
    sr.runs_done = v.runs_done;
    sr.runs_total = v.runs_total;
    sr.winner = WinnerLines(v, PickBest(v));
    for (const auto& imp : SweepImportance(v)) sr.importance.emplace_back(imp.name, imp.eta2);
    sr.plots = SweepPlots(v);
    r.sweeps.push_back(std::move(sr));
  }
  return r;
}

namespace {

// Per commit (repo_url, sha): its family's comparisons by head batch id.
using FamilyComparisons =
    std::map<std::pair<std::string, std::string>, std::map<std::int64_t, BatchComparison>>;

// The comparisons of the families of `batches`' commits (each corrected over
// its whole family, as `show` and the commit status are). The families are
// read first, then compared on up to 4 threads: resampling
// (stats/bootstrap.h) is most of a report's time when serve has not seen
// its batches yet, and families share nothing.
Result<FamilyComparisons> CompareFamilies(Store& store, const std::vector<BatchProgress>& batches,
                                          const std::set<std::string>& wanted) {
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<FamilyMember>>> todo;
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& b : batches) {
    if (IsSweepPointExperiment(b.experiment) || IsReproExperiment(b.experiment)) continue;
    if (!wanted.empty() && !wanted.count(b.experiment)) continue;
    auto key = std::pair{b.repo_url, b.sha};
    if (!seen.insert(key).second) continue;
    ASSIGN_OR_RETURN(auto family, CommitFamily(store, b.repo_url, b.sha));
    todo.emplace_back(std::move(key), std::move(family));
  }
  std::vector<std::vector<std::optional<BatchComparison>>> made(todo.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      made[i] = CompareFamily(todo[i].second, /*compare_running=*/true);
    }
  };
  const size_t threads = std::min<size_t>(
      {4, std::max<size_t>(1, std::thread::hardware_concurrency()), todo.size()});
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  FamilyComparisons out;
  for (size_t i = 0; i < todo.size(); ++i) {
    auto& by_id = out[todo[i].first];
    for (size_t k = 0; k < made[i].size(); ++k) {
      if (made[i][k]) by_id.emplace(todo[i].second[k].head.id, std::move(*made[i][k]));
    }
  }
  return out;
}

}  // namespace

Result<ReportData> ReportOfBatches(
    Store& store, std::vector<BatchProgress> batches, const std::string& window,
    const std::vector<std::string>& experiments,
    const std::map<std::int64_t, std::vector<std::string>>& reused_at) {
  std::set<std::string> wanted(experiments.begin(), experiments.end());
  std::map<std::pair<std::string, std::string>, ExperimentReport> by_exp;
  ASSIGN_OR_RETURN(auto families, CompareFamilies(store, batches, wanted));
  std::map<std::string, std::vector<BatchProgress>> drift_cache;  // per experiment
  ReportData r;
  r.window = window;
  for (auto& b : batches) {
    if (IsSweepPointExperiment(b.experiment)) {
      // A sweep's points are shown in its own section, not as experiments.
      auto base = b.experiment.substr(0, b.experiment.rfind("@sweep"));
      if (!wanted.empty() && !wanted.count(base)) continue;
      ASSIGN_OR_RETURN(auto runs, store.runs().Runs(b.id, std::nullopt, 0));
      r.runs += static_cast<int>(runs.size());
      ++r.batches;
      continue;
    }
    if (IsReproExperiment(b.experiment)) {
      // A determinism check's runs: counted, and shown with its experiment.
      if (!wanted.empty() && !wanted.count(ReproTargetOf(b.experiment))) continue;
      ASSIGN_OR_RETURN(auto runs, store.runs().Runs(b.id, std::nullopt, 0));
      r.runs += static_cast<int>(runs.size());
      ++r.batches;
      continue;
    }
    if (!wanted.empty() && !wanted.count(b.experiment)) continue;
    auto& er = by_exp[{b.repo_url, b.experiment}];
    er.repo = b.repo;
    er.experiment = b.experiment;
    er.metric = b.metric_name;
    er.goal = b.metric_goal;
    ReportEntry e;
    ASSIGN_OR_RETURN(e.repro, ReproOf(store, b));
    ASSIGN_OR_RETURN(auto drift, DriftOf(store, b, &drift_cache));
    if (drift && drift->drift) e.drift = drift->text;
    if (auto it = reused_at.find(b.id); it != reused_at.end()) e.reused_at = it->second;
    ASSIGN_OR_RETURN(auto parent, ParentBatch(store, b));
    if (parent && (!parent->values.empty() || SameRuns(b, *parent))) {
      // Corrected over the family of its commit (all of it, not only the
      // part inside the window), as `show` and the commit status are.
      auto& by_id = families[std::pair{b.repo_url, b.sha}];
      auto it = by_id.find(b.id);
      e.vs_parent = it != by_id.end() ? it->second : CompareBatches(b, *parent);
    }
    ASSIGN_OR_RETURN(e.runs, store.runs().Runs(b.id, std::nullopt, 0));
    if (!er.entries.empty()) {
      e.spread_p = SpreadGrowthP(er.entries.back().batch.values, b.values);
      e.spread_grew = e.spread_p < 0.05;
    }
    e.batch = std::move(b);
    r.runs += static_cast<int>(e.runs.size());
    ++r.batches;
    er.entries.push_back(std::move(e));
  }
  for (auto& [key, er] : by_exp) r.experiments.push_back(std::move(er));
  return r;
}

std::string RenderMarkdown(const ReportData& r) {
  std::ostringstream o;
  o << "# trainq spread report\n\n";
  o << "Window: " << (r.window == "all" ? "all batches" : "last " + r.window) << "; " << r.batches
    << " batches, " << r.runs << " runs";
  TimeMs first = 0, last = 0;
  for (const auto& er : r.experiments) {
    for (const auto& e : er.entries) {
      if (!first || e.batch.created_ms < first) first = e.batch.created_ms;
      last = std::max(last, e.batch.created_ms);
    }
  }
  if (first) o << ", queued " << Date(first) << " to " << Date(last);
  o << ".\n\n";
  o << BranchNote(r) << "\n\n";
  o << "## Significant changes\n\n";
  int sig = 0;
  for (const auto& er : r.experiments) {
    for (const auto& e : er.entries) {
      if (!Significant(e)) continue;
      ++sig;
      o << "- **" << Md(er.experiment) << "** at `" << ShortSha(e.batch.sha, kReportShaChars) << "` ("
        << Md(e.batch.subject) << "): " << ComparisonText(*e.vs_parent) << "\n";
    }
  }
  if (!sig) o << "None: no batch differs from its baseline beyond seed noise.\n";
  o << "\n";
  for (const auto& er : r.experiments) {
    o << "## " << Md(er.repo) << " / " << Md(er.experiment) << " (" << Md(er.metric) << ", "
      << (er.goal == "min" ? "lower" : "higher") << " is better)\n\n";
    o << "| batch | commit | subject | n | mean | sd | 95% CI | vs baseline | verdict | spread |\n";
    o << "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& e : er.entries) {
      auto s = stats::Summarize(e.batch.values);
      o << "| " << e.batch.id << " | `" << ShortSha(e.batch.sha, kReportShaChars) << "` | "
        << Md(e.batch.subject) << " | " << s.n << " | " << (s.n ? Num(s.mean) : "-") << " | "
        << (s.n > 1 ? Num(s.sd) + FloorCell(e.batch) : "-") << " | " << CiText(s) << " | "
        << DiffText(e) << " | " << VerdictOf(e) << " | "
        << (e.spread_grew ? "**grew** (F-test p=" + Num(e.spread_p, 3) + ")" : "") << " |\n";
    }
    o << "\n";
  }
  o << "How to read it: n counts succeeded runs; sd is the spread across seeds; the 95% CI is\n"
       "the Student-t interval of the mean. \"vs baseline\" is the difference from the same\n"
       "experiment at the base commit, or at the nearest ancestor with the same inputs\n"
       "(paired on the seeds both ran);\n"
       "the verdict is better or worse only when that difference is beyond seed noise\n"
       "(two-sided test at alpha 0.05; the experiments one commit changed are corrected\n"
       "together, Holm unless trainq.yaml says otherwise). \"spread grew\" flags a variance larger "
       "than the\n"
       "previous batch's (one-sided F-test, p < 0.05). \"floor\" beside an sd is the test-set "
       "noise\n"
       "floor sqrt(p(1-p)/n) of runs that report eval_examples; \"sd at it\" means more seeds "
       "will\n"
       "not narrow the spread, a larger evaluation set will (docs/STATISTICS.md).\n";
  if (!r.sweeps.empty()) {
    o << "## Sweeps\n\n";
    for (const auto& sw : r.sweeps) {
      o << "### Sweep " << sw.id << ": " << Md(sw.repo) << " / " << Md(sw.experiment) << " at `"
        << ShortSha(sw.sha, kReportShaChars) << "` (" << sw.state << ")\n\n";
      o << sw.points << "/" << sw.budget_points << " points, " << sw.runs_done << "/"
        << sw.runs_total << " runs ended.\n\n";
      if (sw.winner.empty()) {
        o << "No winner yet: no point has 2 finished seeds.\n\n";
      } else {
        for (const auto& line : sw.winner) o << "- " << Md(line) << "\n";
        o << "\n";
      }
      if (!sw.importance.empty()) {
        o << "Importance (eta squared of the ranks of the points' means):";
        for (const auto& [name, eta2] : sw.importance) o << " " << Md(name) << " " << Num(eta2, 2) << ";";
        o << "\n\n";
      }
    }
  }
  return o.str();
}

namespace {

// One SVG chart: every run as a point per batch, the mean as a bar and the
// 95% interval as a whisker; colour by the verdict against the baseline.
std::string RunsSvg(const ExperimentReport& er) {
  const int w = 760, h = 260, left = 60, right = 20, top = 16, bottom = 40;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& e : er.entries) {
    for (double v : e.batch.values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    auto s = stats::Summarize(e.batch.values);
    if (s.ci95) {
      lo = std::min(lo, s.ci95->lo);
      hi = std::max(hi, s.ci95->hi);
    }
  }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\" aria-label=\"runs of "
    << HtmlEscape(er.experiment) << "\">";
  if (!std::isfinite(lo)) {
    o << "<text x=\"" << left << "\" y=\"" << h / 2 << "\">no finished runs</text></svg>";
    return o.str();
  }
  if (hi - lo < 1e-12) {
    lo -= 0.5e-3;
    hi += 0.5e-3;
  }
  double pad = (hi - lo) * 0.08;
  lo -= pad;
  hi += pad;
  size_t n = er.entries.size();
  double slot = static_cast<double>(w - left - right) / static_cast<double>(std::max<size_t>(n, 1));
  auto X = [&](size_t i) { return left + slot * (static_cast<double>(i) + 0.5); };
  auto Y = [&](double v) { return top + (hi - v) / (hi - lo) * (h - top - bottom); };
  // Axes and y ticks, at round numbers.
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
    << "\" stroke=\"" << palette::kMuted << "\"/>";
  const AxisTicks ticks = NiceTicks(lo, hi);
  for (double v : ticks.values) {
    o << "<text class=\"ytick\" x=\"" << left - 6 << "\" y=\"" << Num(Y(v) + 4, 1)
      << "\" font-size=\"11\" text-anchor=\"end\">" << TickLabel(v, ticks.decimals)
      << "</text>";
    o << "<line x1=\"" << left << "\" y1=\"" << Num(Y(v), 1) << "\" x2=\"" << w - right
      << "\" y2=\"" << Num(Y(v), 1) << "\" stroke=\"" << palette::kLine << "\"/>";
  }
  for (size_t i = 0; i < n; ++i) {
    const auto& e = er.entries[i];
    std::string_view colour = palette::kNoise;
    if (e.vs_parent && e.vs_parent->verdict == stats::Verdict::kBetter) colour = palette::kBetter;
    if (e.vs_parent && e.vs_parent->verdict == stats::Verdict::kWorse) colour = palette::kWorse;
    double x = X(i);
    o << "<text x=\"" << Num(x, 1) << "\" y=\"" << h - bottom + 16
      << "\" font-size=\"11\" text-anchor=\"middle\" font-family=\"monospace\">"
      << ShortSha(e.batch.sha, kReportShaChars) << "</text>";
    // Points spread sideways by repeat index so equal values stay visible.
    size_t k = e.batch.values.size();
    for (size_t j = 0; j < k; ++j) {
      double dx = k > 1 ? (static_cast<double>(j) / static_cast<double>(k - 1) - 0.5) * slot * 0.5
                        : 0.0;
      o << "<circle cx=\"" << Num(x + dx, 1) << "\" cy=\"" << Num(Y(e.batch.values[j]), 1)
        << "\" r=\"3\" fill=\"" << colour << "\" fill-opacity=\"0.55\"><title>seed "
        << e.batch.seeds[j] << ": " << Num(e.batch.values[j]) << "</title></circle>";
    }
    auto s = stats::Summarize(e.batch.values);
    if (s.n == 0) continue;
    if (s.ci95) {
      o << "<line x1=\"" << Num(x + slot * 0.32, 1) << "\" y1=\"" << Num(Y(s.ci95->lo), 1)
        << "\" x2=\"" << Num(x + slot * 0.32, 1) << "\" y2=\"" << Num(Y(s.ci95->hi), 1)
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>";
    }
    o << "<line x1=\"" << Num(x - slot * 0.3, 1) << "\" y1=\"" << Num(Y(s.mean), 1) << "\" x2=\""
      << Num(x + slot * 0.36, 1) << "\" y2=\"" << Num(Y(s.mean), 1) << "\" stroke=\"" << colour
      << "\" stroke-width=\"2\"><title>mean " << Num(s.mean) << "</title></line>";
  }
  o << "</svg>";
  return o.str();
}

// The spread (sd) of each batch over time; flagged batches in red.
std::string SpreadSvg(const ExperimentReport& er) {
  const int w = 760, h = 140, left = 60, right = 20, top = 12, bottom = 28;
  double hi = 0;
  for (const auto& e : er.entries) hi = std::max(hi, stats::Summarize(e.batch.values).sd);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\" aria-label=\"spread of "
    << HtmlEscape(er.experiment) << "\">";
  if (hi <= 0) hi = 1e-3;
  hi *= 1.15;
  size_t n = er.entries.size();
  double slot = static_cast<double>(w - left - right) / static_cast<double>(std::max<size_t>(n, 1));
  auto X = [&](size_t i) { return left + slot * (static_cast<double>(i) + 0.5); };
  auto Y = [&](double v) { return top + (hi - v) / hi * (h - top - bottom); };
  o << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\""
    << h - bottom << "\" stroke=\"" << palette::kMuted << "\"/>";
  o << "<text x=\"" << left - 6 << "\" y=\"" << top + 8
    << "\" font-size=\"11\" text-anchor=\"end\">" << Num(hi, 4) << "</text>";
  o << "<text x=\"" << left - 6 << "\" y=\"" << h - bottom
    << "\" font-size=\"11\" text-anchor=\"end\">0</text>";
  std::string path;
  for (size_t i = 0; i < n; ++i) {
    auto s = stats::Summarize(er.entries[i].batch.values);
    if (s.n < 2) continue;
    path += (path.empty() ? "M" : " L") + Num(X(i), 1) + " " + Num(Y(s.sd), 1);
  }
  if (!path.empty())
    o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << palette::kAccent << "\"/>";
  for (size_t i = 0; i < n; ++i) {
    const auto& e = er.entries[i];
    auto s = stats::Summarize(e.batch.values);
    if (s.n < 2) continue;
    o << "<circle cx=\"" << Num(X(i), 1) << "\" cy=\"" << Num(Y(s.sd), 1) << "\" r=\""
      << (e.spread_grew ? 5 : 3) << "\" fill=\""
      << (e.spread_grew ? palette::kWorse : palette::kAccent) << "\"><title>"
      << ShortSha(e.batch.sha, kReportShaChars) << ": sd " << Num(s.sd)
      << (e.spread_grew ? " (spread grew)" : "") << "</title></circle>";
  }
  o << "</svg>";
  return o.str();
}

}  // namespace

std::string RenderHtml(const ReportData& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<title>trainq spread report</title>\n<style>\n"
    << PaletteCss()  // the dashboard's colours (palette.h)
    << "body{font-family:system-ui,sans-serif;margin:2em;max-width:62em;color:var(--fg)}\n"
       "table{border-collapse:collapse;margin:0.5em 0 1.5em}\n"
       "th,td{border:1px solid var(--line);padding:0.25em 0.6em;text-align:left;font-size:0.9em}\n"
       "th{background:var(--bg)}\ncode{font-size:0.95em}\n"
       ".better{color:var(--better);font-weight:600}.worse{color:var(--worse);font-weight:600}\n"
       ".grew{color:var(--worse)}\nfigure{margin:0.5em 0}\n</style>\n</head>\n<body>\n";
  o << "<h1>trainq spread report</h1>\n";
  o << "<p>Window: " << (r.window == "all" ? "all batches" : "last " + HtmlEscape(r.window)) << "; "
    << r.batches << " batches, " << r.runs << " runs.</p>\n";
  o << "<p>" << HtmlEscape(BranchNote(r)) << "</p>\n";
  o << "<h2>Significant changes</h2>\n<ul>\n";
  int sig = 0;
  for (const auto& er : r.experiments) {
    for (const auto& e : er.entries) {
      if (!Significant(e)) continue;
      ++sig;
      std::string cls = e.vs_parent->verdict == stats::Verdict::kBetter ? "better" : "worse";
      o << "<li><b>" << HtmlEscape(er.experiment) << "</b> at <code>" << ShortSha(e.batch.sha, kReportShaChars)
        << "</code> (" << HtmlEscape(e.batch.subject) << "): <span class=\"" << cls << "\">"
        << HtmlEscape(ComparisonText(*e.vs_parent)) << "</span></li>\n";
    }
  }
  if (!sig) o << "<li>None: no batch differs from its baseline beyond seed noise.</li>\n";
  o << "</ul>\n";
  for (const auto& er : r.experiments) {
    o << "<h2>" << HtmlEscape(er.repo) << " / " << HtmlEscape(er.experiment) << "</h2>\n";
    o << "<p>" << HtmlEscape(er.metric) << ", " << (er.goal == "min" ? "lower" : "higher")
      << " is better. Each point is one run (one seed); the bar is the mean, the whisker its "
         "95% interval; green and red mark a significant change from the parent commit.</p>\n";
    o << RunsSvg(er) << "\n";
    o << "<p>Spread (sd across seeds) per batch; red marks a spread that grew "
         "(one-sided F-test against the previous batch, p &lt; 0.05).</p>\n";
    o << SpreadSvg(er) << "\n";
    o << "<table>\n<tr><th>batch</th><th>commit</th><th>subject</th><th>n</th><th>mean</th>"
         "<th>sd</th><th>95% CI</th><th>vs baseline</th><th>verdict</th><th>spread</th></tr>\n";
    for (const auto& e : er.entries) {
      auto s = stats::Summarize(e.batch.values);
      std::string verdict = VerdictOf(e);
      std::string cls = Significant(e) ? (e.vs_parent->verdict == stats::Verdict::kBetter
                                               ? " class=\"better\""
                                               : " class=\"worse\"")
                                       : "";
      o << "<tr><td>" << e.batch.id << "</td><td><code>" << ShortSha(e.batch.sha, kReportShaChars)
        << "</code></td><td>" << HtmlEscape(e.batch.subject) << "</td><td>" << s.n << "</td><td>"
        << (s.n ? Num(s.mean) : "-") << "</td><td>"
        << (s.n > 1 ? Num(s.sd) + HtmlEscape(FloorCell(e.batch)) : "-") << "</td><td>" << CiText(s)
        << "</td><td>" << DiffText(e) << "</td><td" << cls << ">" << HtmlEscape(verdict)
        << "</td><td>"
        << (e.spread_grew ? "<span class=\"grew\">grew (p=" + Num(e.spread_p, 3) + ")</span>" : "")
        << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  if (!r.sweeps.empty()) o << "<h2>Sweeps</h2>\n";
  for (const auto& sw : r.sweeps) {
    o << "<h3 id=\"sweep-" << sw.id << "\">Sweep " << sw.id << ": " << HtmlEscape(sw.repo) << " / "
      << HtmlEscape(sw.experiment) << " at <code>" << ShortSha(sw.sha, kReportShaChars) << "</code> (" << HtmlEscape(sw.state)
      << ")</h3>\n<p>" << sw.points << "/" << sw.budget_points << " points, " << sw.runs_done
      << "/" << sw.runs_total << " runs ended. ";
    if (sw.winner.empty()) {
      o << "No winner yet: no point has 2 finished seeds.</p>\n";
    } else {
      o << "The winner by its confidence bound:</p>\n<ul>\n";
      for (const auto& line : sw.winner) o << "<li>" << HtmlEscape(line) << "</li>\n";
      o << "</ul>\n";
    }
    // The SVGs inline, without their XML declaration.
    auto inline_svg = [&](const std::string& name) {
      auto it = sw.plots.find(name);
      if (it == sw.plots.end()) return;
      std::string svg = it->second;
      if (svg.rfind("<?xml", 0) == 0) svg = svg.substr(svg.find('\n') + 1);
      o << "<figure class=\"sweep-plot\">" << svg << "</figure>\n";
    };
    o << "<p>The pick after each point against runs spent (its mean and 95% interval), every "
         "point across its parameters, and what each parameter explains.</p>\n";
    inline_svg("progress.svg");
    inline_svg("parallel.svg");
    inline_svg("importance.svg");
    for (const auto& [name, svg] : sw.plots) {
      if (name.rfind("param-", 0) == 0) inline_svg(name);
    }
  }
  o << "</body>\n</html>\n";
  return o.str();
}

std::string RenderJson(const ReportData& r) {
  json j;
  j["window"] = r.window;
  j["batches"] = r.batches;
  j["runs"] = r.runs;
  j["branches"] = r.branches;
  j["off_branch"] = r.off_branch;
  j["experiments"] = json::array();
  for (const auto& er : r.experiments) {
    json ej = {{"repo", er.repo}, {"experiment", er.experiment}, {"metric", er.metric},
               {"goal", er.goal}, {"batches", json::array()}};
    for (const auto& e : er.entries) {
      auto s = stats::Summarize(e.batch.values);
      json bj = {{"id", e.batch.id},
                 {"commit", e.batch.sha},
                 {"parent", e.batch.parent_sha},
                 {"subject", e.batch.subject},
                 {"n", s.n},
                 {"values", e.batch.values},
                 {"seeds", e.batch.seeds},
                 {"spread_grew", e.spread_grew},
                 {"spread_p", e.spread_p}};
      if (s.n) {
        bj["mean"] = s.mean;
        bj["median"] = s.median;
        bj["iqm"] = s.iqm;
        bj["min"] = s.min;
        bj["max"] = s.max;
      }
      bj["sd"] = s.n > 1 ? json(s.sd) : json(nullptr);
      if (auto floor = NoiseFloorJson(e.batch); !floor.is_null()) bj["noise_floor"] = floor;
      bj["ci95"] = s.ci95 ? json::array({s.ci95->lo, s.ci95->hi}) : json(nullptr);
      bj["determinism"] = e.repro ? json(e.repro->text) : json(nullptr);
      bj["drift"] = e.drift ? json(*e.drift) : json(nullptr);
      bj["reused_at"] = e.reused_at;
      if (e.batch.reuses_batch_id) {
        bj["reuses_batch"] = *e.batch.reuses_batch_id;
        bj["reused_from"] = e.batch.reused_from_sha;
      }
      if (e.vs_parent) {
        // The verdict document's fields (ComparisonJson): `p` and
        // `interval` are what the verdict used (adjusted, widened), `p_raw`
        // the test's own; `ci95` is the test's unwidened 95% interval.
        const BatchComparison& c = *e.vs_parent;
        json vp = {{"verdict", VerdictWord(c)},
                   {"unchanged", c.unchanged},
                   {"paired", c.paired},
                   {"alpha", c.alpha},
                   {"baseline_commit", c.b.sha},
                   {"text", ComparisonText(c)}};
        auto rules = RulesOf(e.batch);
        vp["min_effect"] = rules.min_effect ? json(*rules.min_effect) : json(nullptr);
        if (c.cmp) {
          vp["diff"] = c.cmp->diff;
          const auto& t = c.paired ? c.cmp->paired : c.cmp->welch;
          if (t) vp["ci95"] = {t->ci95.lo, t->ci95.hi};
        }
        vp["p"] = c.p_adjusted ? json(*c.p_adjusted) : c.p_raw ? json(*c.p_raw) : json(nullptr);
        vp["p_raw"] = c.p_raw ? json(*c.p_raw) : json(nullptr);
        vp["interval"] = c.interval ? json::array({c.interval->lo, c.interval->hi}) : json(nullptr);
        vp["interval_level"] = c.interval_level;
        auto cj = ComparisonJson(c);
        vp["correction"] = cj["correction"];
        vp["runs_needed"] = cj["runs_needed"];
        vp["pairing_unreliable"] = cj["pairing_unreliable"];
        bj["vs_parent"] = vp;
      } else {
        bj["vs_parent"] = nullptr;
      }
      ej["batches"].push_back(bj);
    }
    j["experiments"].push_back(ej);
  }
  j["sweeps"] = json::array();
  for (const auto& sw : r.sweeps) {
    json imp = json::object();
    for (const auto& [name, eta2] : sw.importance) imp[name] = eta2;
    j["sweeps"].push_back({{"id", sw.id},
                           {"repo", sw.repo},
                           {"experiment", sw.experiment},
                           {"commit", sw.sha},
                           {"state", sw.state},
                           {"points", sw.points},
                           {"budget_points", sw.budget_points},
                           {"runs_done", sw.runs_done},
                           {"runs_total", sw.runs_total},
                           {"winner", sw.winner},
                           {"importance", imp}});
  }
  return j.dump(2) + "\n";
}

std::string RenderRunsCsv(const ReportData& r) {
  std::ostringstream o;
  o << "repo,experiment,batch,commit,seed,repeat,state,attempts,metric,value,error\n";
  for (const auto& er : r.experiments) {
    for (const auto& e : er.entries) {
      for (const auto& run : e.runs) {
        o << Csv(er.repo) << "," << Csv(er.experiment) << "," << e.batch.id << ","
          << e.batch.sha << "," << run.seed << "," << run.repeat << ","
          << RunStateName(run.state) << "," << run.attempts << "," << Csv(er.metric) << ","
          << (run.metric_value ? FormatDouble(*run.metric_value, 6) : "") << ","
          << Csv(run.last_error) << "\n";
      }
    }
  }
  return o.str();
}


bool IsReportFileFormat(const std::string& f) {
  for (const char* k : kReportFileFormats) {
    if (f == k) return true;
  }
  return false;
}

std::string RenderReportFile(const ReportData& data, const std::string& format) {
  if (format == "md") return RenderMarkdown(data);
  if (format == "html") return RenderHtml(data);
  if (format == "json") return RenderJson(data);
  return RenderRunsCsv(data);
}

std::string ReportSummaryLine(const ReportData& data) {
  std::ostringstream s;
  s << data.batches << " batches, " << data.runs << " runs, " << data.experiments.size()
    << " experiment(s)";
  if (!data.sweeps.empty()) s << ", " << data.sweeps.size() << " sweep(s)";
  s << "\n";
  return s.str();
}

Result<TimeMs> ReportSince(const std::string& since, TimeMs now) {
  if (since.empty()) return TimeMs{0};
  auto d = ParseDurationSeconds(since);
  if (!d) return Fail(ErrorKind::kInvalidArgument, "since: " + d.error().message);
  return now - *d * 1000;
}

namespace {

std::string TableText(std::vector<BatchProgress> batches, const std::string& since, bool more) {
  if (batches.empty()) return "no batches" + (since.empty() ? "" : " in the last " + since) + "\n";
  Table t({"BATCH", "COMMIT", "EXPERIMENT", "METRIC", "N", "MEAN", "SD", "MIN", "MAX", "RUNS"});
  for (const auto& b : batches) {
    auto s = stats::Summarize(b.values);
    auto num = [&](double v) { return s.n ? FormatDouble(v, 4) : std::string("-"); };
    t.Add({std::to_string(b.id), ShortSha(b.sha, kReportShaChars), b.experiment,
           b.metric_name + (b.metric_goal == "max" ? " ↑" : " ↓"), std::to_string(s.n),
           num(s.mean), s.n > 1 ? FormatDouble(s.sd, 4) : "-", num(s.min), num(s.max),
           ProgressText(b)});
  }
  std::string text = t.Render();
  if (more) {
    text += "(the newest " + std::to_string(batches.size()) + " batches" +
            (since.empty() ? "" : " of the last " + since) +
            "; older ones: --limit N for more, --limit 0 for all)\n";
  }
  return text;
}

}  // namespace

Status CheckReportExperiments(Store& store, const std::vector<std::string>& experiments,
                              const std::string& option, const std::string& where) {
  if (experiments.empty()) return {};
  // A misspelt name is an error, not an empty report. One index probe per
  // name; the list of known names only for the message.
  for (const auto& e : experiments) {
    ASSIGN_OR_RETURN(bool has, store.runs().HasExperiment(e));
    if (has) continue;
    ASSIGN_OR_RETURN(auto known, store.runs().ExperimentNames());
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

Result<int> ParseReportLimit(const std::string& text) {
  int n = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "expected a whole number of batches >= 0 (0: all), got \"" + text + "\"");
  }
  return n;
}

int ReportLimit(const ReportQuery& q) {
  if (q.limit) return std::max(0, *q.limit);
  return q.format == "table" ? kReportTableLimit : 0;
}

Result<std::string> ReportBytes(Store& store, const ReportQuery& q, TimeMs now) {
  ASSIGN_OR_RETURN(TimeMs since, ReportSince(q.since, now));
  if (IsReportFileFormat(q.format) || q.format == "summary") {
    ASSIGN_OR_RETURN(auto data,
                     BuildReport(store, since, q.since.empty() ? "all" : q.since, q.experiments));
    return q.format == "summary" ? ReportSummaryLine(data) : RenderReportFile(data, q.format);
  }
  if (q.format != "table" && q.format != "batches") {
    return Fail(ErrorKind::kInvalidArgument,
                "format: unknown format '" + q.format +
                    "' (md, html, json, csv, summary, table, batches)");
  }
  const int limit = ReportLimit(q);
  std::vector<BatchProgress> batches;
  if (since == 0 && limit > 0) {
    // The newest `limit` (one more tells whether there are older ones): a
    // walk that stops there, not a read of the whole history.
    ASSIGN_OR_RETURN(batches, store.runs().NewestBatches(q.experiments, limit + 1));
  } else {
    ASSIGN_OR_RETURN(batches, store.runs().BatchesSince(since));
    std::set<std::string> wanted(q.experiments.begin(), q.experiments.end());
    std::erase_if(batches, [&](const BatchProgress& b) {
      return !wanted.empty() && !wanted.count(b.experiment);
    });
  }
  bool more = limit > 0 && batches.size() > static_cast<size_t>(limit);
  if (more) batches.resize(static_cast<size_t>(limit));
  if (q.format == "batches") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& b : batches) j.push_back(BatchJson(b));
    return j.dump(2) + "\n";
  }
  return TableText(std::move(batches), q.since, more);
}

}  // namespace trainq
