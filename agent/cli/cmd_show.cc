// `trainq show COMMIT`: what trainq did with one commit: its batches, why each
// runs (the change that triggered it), their progress and spread, the commit
// status sent to the forge, and the pushes that brought the commit.
//
// Each batch is compared with the same experiment at the parent commit.
// Built in two steps so more can be added: LoadCommitView() gathers everything
// into one JSON document (what --json prints), RenderCommitView() writes the
// terminal view of it. Extend both with a new key.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "agent/cli/cli.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/commit_view.h"
#include "agent/results/table.h"
#include "core/strings.h"
#include "stats/summary.h"

using nlohmann::json;

namespace trainq {

namespace {

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
  std::string floor;
  if (s.contains("noise_floor") && s["noise_floor"]["floor"].is_number()) {
    floor = "; " + s["noise_floor"].value("short", "");
  }
  return text + " (n=" + std::to_string(n) + floor + ")";
}

}  // namespace

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
    // The family the verdicts are corrected over: what the commit changed.
    if (j.contains("family")) {
      const json& f = j["family"];
      std::string changed, same;
      for (const auto& e : f["experiments"]) changed += (changed.empty() ? "" : ", ") + e.get<std::string>();
      for (const auto& e : f["unchanged"]) same += (same.empty() ? "" : ", ") + e.get<std::string>();
      if (f.value("size", 0) > 1 || !same.empty()) {
        out << "  family: " << f.value("size", 0) << " changed (" << (changed.empty() ? "none" : changed)
            << ")" << (f.value("text", "").empty() ? "" : ", " + f.value("text", ""));
        if (!same.empty()) out << "; unchanged, not counted: " << same;
        out << "\n";
      }
    }
    for (const auto& b : batches) {
      out << "  batch " << b.value("id", std::int64_t{0}) << " " << b.value("experiment", "")
          << "\n    why:    " << b.value("reason", "") << "\n";
      if (b.contains("reuses_batch")) {
        out << "    reused: the runs of batch " << b.value("reuses_batch", std::int64_t{0})
            << " at " << ShortSha(b.value("reused_from", ""))
            << " (same inputs; nothing queued here)\n";
      }
      if (const json& s = b["progress"]["summary"]; s.contains("noise_floor")) {
        out << "    floor:  " << s["noise_floor"].value("text", "") << "\n";
      }
      if (b.contains("determinism")) out << "    determinism: " << b.value("determinism", "") << "\n";
      if (b.contains("drift")) out << "    " << b.value("drift", "") << "\n";
      if (b.contains("repro_of")) {
        out << "    check:  runs seeds of " << b.value("repro_of", "")
            << " again (its determinism line says whether they agree)\n";
      } else if (b.contains("unchanged")) {
        out << "    change: " << b["unchanged"].value("text", "") << "\n";
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
        if (vp.contains("probability_of_improvement") && vp["probability_of_improvement"].is_object()) {
          out << "    chance: " << vp["probability_of_improvement"].value("text", "") << "\n";
        }
        if (vp.contains("top_up") && vp["top_up"].is_string()) {
          out << "    top-up: " << vp["top_up"].get<std::string>() << "\n";
        }
        if (vp.contains("cost") && vp["cost"].is_object()) {
          out << "    cost:   " << vp["cost"].value("text", "") << "\n";
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
        << p.value("ref", "") << " " << ShortSha(p.value("before", "")) << ".."
        << ShortSha(p.value("after", "")) << " received "
        << FormatTimestamp(p.value("received_ms", std::int64_t{0})) << " UTC, "
        << p.value("state", "");
    std::string note = p.value("error", "").empty() ? p.value("result", "") : p.value("error", "");
    if (!note.empty()) out << ": " << note;
    out << "\n";
  }
}

Status CmdShow(const ShowOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
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
