// `trainq show COMMIT`: what trainq did with one commit: its batches, why each
// runs (the change that triggered it), their progress and spread, the commit
// status sent to the forge, and the pushes that brought the commit.
//
// Each batch is compared with the same experiment at the parent commit.
// Built in two steps so more can be added: LoadCommitView() gathers everything
// into one JSON document (what --json prints), RenderCommitView() writes the
// terminal view of it. Extend both with a new key.
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <ostream>
#include <map>
#include <set>

#include "agent/results/analysis.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/results/table.h"
#include "core/strings.h"
#include "queue/store.h"
#include "stats/summary.h"

using nlohmann::json;

namespace trainq {

namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

json Progress(const BatchProgress& b) {
  json counts = json::object();
  std::int64_t total = 0;
  for (int i = 0; i < kRunStateCount; ++i) {
    counts[std::string(RunStateName(static_cast<RunState>(i)))] = b.counts[i];
    total += b.counts[i];
  }
  auto s = stats::Summarize(b.values);
  json summary = {{"n", s.n}};
  if (s.n > 0) {
    summary["mean"] = s.mean;
    summary["sd"] = s.n > 1 ? json(s.sd) : json(nullptr);
    summary["min"] = s.min;
    summary["max"] = s.max;
  }
  return {{"runs", total}, {"counts", counts}, {"values", b.values}, {"summary", summary}};
}

std::string ProgressLine(const json& p) {
  const json& c = p["counts"];
  auto n = [&](const char* k) { return c.value(k, std::int64_t{0}); };
  std::string text = std::to_string(n("succeeded")) + "/" +
                     std::to_string(p.value("runs", std::int64_t{0})) + " done, " +
                     std::to_string(n("dead") + n("failed")) + " failed";
  if (n("running") + n("leased") > 0) {
    text += ", " + std::to_string(n("running") + n("leased")) + " running";
  }
  if (n("cancelled") > 0) text += ", " + std::to_string(n("cancelled")) + " cancelled";
  return text;
}

std::string SummaryLine(const std::string& metric, const json& s) {
  int n = s.value("n", 0);
  if (n == 0) return metric + " -";
  std::string text = metric + " " + FormatDouble(s.value("mean", 0.0), 4);
  if (n > 1 && s["sd"].is_number()) text += " ± " + FormatDouble(s["sd"].get<double>(), 4);
  return text + " (n=" + std::to_string(n) + ")";
}

}  // namespace

// Everything trainq knows about the commit(s) whose sha starts with `prefix`.
// kNotFound when nothing matches; kInvalidArgument when the prefix is not hex
// or names several commits.
Result<json> LoadCommitView(Store& store, const std::string& prefix_in) {
  std::string prefix = Lower(std::string(Trim(prefix_in)));
  if (prefix.size() < 4 || prefix.size() > 40 ||
      !std::all_of(prefix.begin(), prefix.end(),
                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    return Fail(ErrorKind::kInvalidArgument,
                "COMMIT: expected a commit id (at least 4 hex digits), got \"" + prefix_in + "\"");
  }
  ASSIGN_OR_RETURN(auto all, store.Batches(false, 0));
  std::vector<BatchProgress> batches;
  std::set<std::string> shas;
  for (auto& b : all) {
    if (b.sha.starts_with(prefix)) {
      shas.insert(b.sha);
      batches.push_back(std::move(b));
    }
  }
  ASSIGN_OR_RETURN(auto pushes, store.PushesForCommit(prefix));
  for (const auto& p : pushes) shas.insert(p.after_sha);
  if (shas.size() > 1) {
    std::string list;
    for (const auto& s : shas) list += (list.empty() ? "" : ", ") + s.substr(0, 12);
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + prefix + "' is ambiguous: " + list + " (give more digits)");
  }
  if (shas.empty()) {
    return Fail(ErrorKind::kNotFound,
                "no batch or push for commit " + prefix + " (queue one with `trainq submit` or "
                "push to a watched repository)");
  }
  json j;
  j["commit"] = *shas.begin();
  j["subject"] = batches.empty() ? "" : batches.front().subject;
  j["parent"] = batches.empty() ? "" : batches.front().parent_sha;
  j["repo"] = batches.empty() ? "" : batches.front().repo;
  j["batches"] = json::array();
  // The batches of the commit are one family: their verdicts are corrected
  // together (agent/results/analysis.h), as the commit status and the PR
  // comment correct them.
  std::map<std::int64_t, BatchComparison> corrected;
  if (!batches.empty()) {
    ASSIGN_OR_RETURN(auto family,
                     CommitFamily(store, batches.front().repo_url, batches.front().sha));
    auto comparisons = CompareFamily(family, /*compare_running=*/true);
    for (size_t i = 0; i < family.size(); ++i) {
      if (comparisons[i]) corrected.emplace(family[i].head.id, std::move(*comparisons[i]));
    }
  }
  // Oldest first: the order they were queued in.
  for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
    const auto& b = *it;
    json bj = {{"id", b.id},
               {"experiment", b.experiment},
               {"metric", b.metric_name},
               {"goal", b.metric_goal},
               {"repeats", b.repeats},
               {"reason", b.reason},
               {"created_ms", b.created_ms},
               {"progress", Progress(b)}};
    if (b.reuses_batch_id) {
      bj["reuses_batch"] = *b.reuses_batch_id;
      bj["reused_from"] = b.reused_from_sha;
    }
    if (IsReproExperiment(b.experiment)) {
      // A determinism check's companion: read with its experiment's batch.
      bj["repro_of"] = ReproTargetOf(b.experiment);
      j["batches"].push_back(bj);
      continue;
    }
    ASSIGN_OR_RETURN(auto repro, ReproOf(store, b));
    if (repro) bj["determinism"] = repro->text;
    ASSIGN_OR_RETURN(auto drift, DriftOf(store, b));
    if (drift) bj["drift"] = drift->text;
    // The same experiment at the parent commit: difference, test, verdict.
    ASSIGN_OR_RETURN(auto parent, ParentBatch(store, b));
    if (parent) {
      auto found = corrected.find(b.id);
      BatchComparison c = found != corrected.end() ? found->second : CompareBatches(b, *parent);
      json vp = ComparisonJson(c);
      vp["parent_batch"] = parent->id;
      vp["text"] = ComparisonText(c);
      vp["parent_spread"] = SpreadText(*parent);
      vp["baseline_sha"] = parent->sha;
      vp["baseline_note"] = BaselineText(b);
      bj["vs_parent"] = vp;
    } else if (!b.baseline_note.empty()) {
      bj["baseline_note"] = b.baseline_note;
    }
    // Failed attempts, with the run's own last output (agent/runner/run_process.h).
    if (b.count(RunState::kDead) + b.count(RunState::kFailed) > 0) {
      ASSIGN_OR_RETURN(auto runs, store.Runs(b.id, std::nullopt, 0));
      json failures = json::array();
      for (const auto& r : runs) {
        if (r.state != RunState::kDead && r.state != RunState::kFailed) continue;
        failures.push_back({{"run", r.id},
                            {"seed", r.seed},
                            {"state", std::string(RunStateName(r.state))},
                            {"attempts", r.attempts},
                            {"error", r.last_error}});
      }
      bj["failures"] = failures;
    }
    ASSIGN_OR_RETURN(auto status, store.GetCommitStatus(b.id));
    if (status) {
      bj["forge_status"] = {{"context", status->context},
                            {"wanted", status->state},
                            {"posted", status->posted_state},
                            {"description", status->description},
                            {"gave_up", status->gave_up},
                            {"error", status->last_error}};
    }
    j["batches"].push_back(bj);
  }
  j["pushes"] = json::array();
  for (const auto& p : pushes) {
    j["pushes"].push_back({{"id", p.id},
                           {"source", p.source},
                           {"delivery", p.delivery_id},
                           {"repo", p.repo_url},
                           {"ref", p.ref},
                           {"before", p.before_sha},
                           {"after", p.after_sha},
                           {"state", p.state},
                           {"result", p.result},
                           {"error", p.error},
                           {"received_ms", p.received_ms}});
  }
  return j;
}

void RenderCommitView(const json& j, std::ostream& out) {
  out << "commit " << j.value("commit", "");
  if (!j.value("subject", "").empty()) out << " \"" << j.value("subject", "") << "\"";
  if (!j.value("repo", "").empty()) out << " (" << j.value("repo", "") << ")";
  out << "\n";
  const json& batches = j["batches"];
  if (batches.empty()) {
    out << "batches: none\n";
  } else {
    out << "batches:\n";
    Table t({"BATCH", "EXPERIMENT", "PROGRESS", "METRIC (mean ± sd)"});
    for (const auto& b : batches) {
      t.Add({std::to_string(b.value("id", std::int64_t{0})), b.value("experiment", ""),
             ProgressLine(b["progress"]), SummaryLine(b.value("metric", ""), b["progress"]["summary"])});
    }
    out << t.Render("  ");
    for (const auto& b : batches) {
      out << "  batch " << b.value("id", std::int64_t{0}) << " " << b.value("experiment", "")
          << "\n    why:    " << b.value("reason", "") << "\n";
      if (b.contains("reuses_batch")) {
        out << "    reused: the runs of batch " << b.value("reuses_batch", std::int64_t{0})
            << " at " << b.value("reused_from", "").substr(0, 10)
            << " (same inputs; nothing queued here)\n";
      }
      if (b.contains("determinism")) out << "    determinism: " << b.value("determinism", "") << "\n";
      if (b.contains("drift")) out << "    " << b.value("drift", "") << "\n";
      if (b.contains("repro_of")) {
        out << "    check:  runs seeds of " << b.value("repro_of", "")
            << " again (its determinism line says whether they agree)\n";
      } else if (b.contains("vs_parent")) {
        // One word for what a batch is compared with, wherever it was found.
        const json& vp = b["vs_parent"];
        out << "    baseline: " << vp.value("parent_spread", "") << " (batch "
            << vp.value("parent_batch", std::int64_t{0}) << ": " << vp.value("baseline_note", "")
            << ")\n"
            << "    change: " << vp.value("text", "") << "\n";
        if (vp.contains("runs_needed") && vp["runs_needed"].is_string()) {
          out << "    advice: " << vp["runs_needed"].get<std::string>() << "\n";
        }
      } else if (b.contains("baseline_note")) {
        out << "    change: no baseline (" << b.value("baseline_note", "") << ")\n";
      } else if (j.value("parent", "").empty()) {
        out << "    change: no baseline (a root commit: nothing before it to compare with)\n";
      } else {
        out << "    change: no runs of this experiment at the parent commit\n";
      }
      if (b.contains("failures")) {
        size_t shown = 0;
        for (const auto& f : b["failures"]) {
          if (++shown > 3) {
            out << "    ... and " << b["failures"].size() - 3
                << " more (`trainq runs --batch " << b.value("id", std::int64_t{0}) << "`)\n";
            break;
          }
          std::string err = f.value("error", "");
          for (auto& c : err) {
            if (c == '\n') c = ' ';
          }
          out << "    failed: run " << f.value("run", std::int64_t{0}) << " seed "
              << f.value("seed", std::int64_t{0}) << " (" << f.value("state", "") << "): " << err
              << "\n";
        }
      }
      if (b.contains("forge_status")) {
        const json& s = b["forge_status"];
        std::string posted = s.value("posted", "");
        out << "    status: " << s.value("context", "") << " " << s.value("wanted", "");
        if (s.value("gave_up", false)) {
          out << " (given up: " << s.value("error", "") << ")";
        } else if (posted != s.value("wanted", "")) {
          out << " (not posted yet" << (s.value("error", "").empty() ? "" : ": " +
                                                                               s.value("error", ""))
              << ")";
        }
        out << " - " << s.value("description", "") << "\n";
      }
    }
  }
  for (const auto& p : j["pushes"]) {
    out << "push " << p.value("id", std::int64_t{0}) << ": " << p.value("source", "") << " "
        << p.value("ref", "") << " " << p.value("before", "").substr(0, 10) << ".."
        << p.value("after", "").substr(0, 10) << " received "
        << FormatTimestamp(p.value("received_ms", std::int64_t{0})) << " UTC, "
        << p.value("state", "");
    std::string note = p.value("error", "").empty() ? p.value("result", "") : p.value("error", "");
    if (!note.empty()) out << ": " << note;
    out << "\n";
  }
}

Status CmdShow(const ShowOptions& o, std::ostream& out) {
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  // A revision git understands (HEAD, a branch, a tag, a short id) when the
  // repository resolves it; else the text as a commit id prefix.
  std::string commit = o.commit;
  if (auto sha = ResolveRevision(o.commit, o.repo)) commit = *sha;
  ASSIGN_OR_RETURN(auto view, LoadCommitView(store, commit));
  if (o.json) {
    out << view.dump(2) << "\n";
    return {};
  }
  RenderCommitView(view, out);
  return {};
}

// `trainq show`.
void AddShowCommand(CLI::App& app, const CliContext& ctx) {
  // show
  auto show = std::make_shared<ShowOptions>();
  auto* c_show = app.add_subcommand("show", "A commit's batches: why each runs, progress, spread");
  c_show->add_option("COMMIT", show->commit, "Revision: HEAD, a branch, a tag, a (short) commit id")
      ->required();
  c_show->add_option("--repo", show->repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_show->add_flag("--json", show->json, "Print as JSON");
  c_show->callback([=] {
    show->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdShow(*show, std::cout));
  });
}

}  // namespace trainq
