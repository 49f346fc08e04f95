#include "agent/results/gate.h"

#include <memory>
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <set>

#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "agent/results/sweep.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "core/strings.h"

namespace trainq {

namespace {


struct Outcome {
  std::string experiment;
  std::string outcome;  // pass | regression | undecided
  std::string reason;
  std::string line;     // the printed line
  std::optional<BatchComparison> comparison;
  bool may_change = false;  // waiting could decide it
};

std::string Progress(const BatchProgress& b) {
  std::int64_t total = 0;
  for (auto c : b.counts) total += c;
  std::int64_t done = b.count(RunState::kSucceeded);
  return std::to_string(done) + "/" + std::to_string(total) + " done";
}

// The commits a gate compares: the head, the baseline as given, and the base
// the head is compared at (their merge-base when the repository is at hand).
struct GateCommits {
  std::string head_sha;
  std::string baseline_sha;
  std::string base_sha;
  std::shared_ptr<GitRepo> git;  // the repository, when at hand
  // The repository is at hand and lacks the head commit: why, in words
  // (NoBatchReason); "" otherwise.
  std::string head_missing;
};

// What the gate says when REV has no batch.
std::string NoBatchReason(const GateRequest& req, const GateCommits& c) {
  if (!c.head_missing.empty()) return c.head_missing;
  return "no batch at " + req.rev + " (" + ShortSha(c.head_sha, kReportShaChars) +
         "): not submitted, or its push is not processed yet";
}

Result<GateCommits> ResolveGateCommits(const GateRequest& req) {
  GateCommits c;
  ASSIGN_OR_RETURN(c.head_sha, ResolveRevision(req.rev, req.repo_dir));
  ASSIGN_OR_RETURN(c.baseline_sha, ResolveRevision(req.baseline, req.repo_dir));
  c.base_sha = c.baseline_sha;
  if (req.repo_dir.empty()) return c;
  auto git = GitRepo::Open(req.repo_dir);
  if (!git) return c;
  // A commit the repository lacks has no merge base there: say what is
  // missing rather than git's "object not found".
  if (!git->Resolve(c.head_sha)) {
    std::string sha = ShortSha(c.head_sha, kReportShaChars);
    c.head_missing =
        !req.mirror_of.empty()
            ? "commit " + sha + " is not in the mirror of " + req.mirror_of +
                  ": serve has not seen a push of it yet (it fetches the watched branches at "
                  "start and every `catch_up`); push it again, or wait with --wait"
            : "commit " + sha + " is not in " + req.repo_dir +
                  ": fetch it there, or give --repo the repository that has it";
    return c;
  }
  if (c.head_sha.size() == 40 && c.baseline_sha.size() == 40 && git->Resolve(c.baseline_sha)) {
    c.git = std::make_shared<GitRepo>(std::move(*git));
    ASSIGN_OR_RETURN(auto mb, c.git->MergeBase(c.head_sha, c.baseline_sha));
    if (mb) c.base_sha = *mb;
  }
  return c;
}

// The batch head `h` is compared with, and how it was found.
Result<std::pair<std::optional<BatchProgress>, std::string>> GateBaseline(
    Store& store, const GateCommits& c, const BatchProgress& h) {
  const std::string& base_sha = c.base_sha;
  std::optional<BatchProgress> base;
  std::string how;
  if (base_sha == h.sha || (!h.base_sha.empty() && h.base_sha.starts_with(base_sha)) ||
      (!h.base_sha.empty() && base_sha.size() == 40 && h.base_sha == base_sha)) {
    ASSIGN_OR_RETURN(base, ParentBatch(store, h));
    how = BaselineText(h);
  } else if (c.git) {
    ASSIGN_OR_RETURN(auto found, FindEquivalentBatch(store, *c.git, h.repo_url,
                                                     h.experiment, base_sha));
    base = found.batch;
    if (found.batch) {
      how = found.steps == 0
                ? "at " + ShortSha(base_sha, kReportShaChars)
                : "at " + ShortSha(found.at_sha, kReportShaChars) + ", " +
                      std::to_string(found.steps) + " commits before " +
                      ShortSha(base_sha, kReportShaChars) + " with the same inputs";
    } else {
      how = found.stopped;
    }
  } else {
    ASSIGN_OR_RETURN(auto candidates, store.runs().BatchesForCommit(base_sha));
    for (auto& cand : candidates) {
      if (cand.experiment == h.experiment && cand.repo_url == h.repo_url) base = cand;
    }
    how = "at " + ShortSha(base_sha, kReportShaChars);
  }
  return std::pair{std::move(base), std::move(how)};
}

// One gated experiment's outcome from its comparison in the family.
Outcome JudgeGated(const GateRequest& req, const GateCommits& c, const FamilyMember& member,
                   const std::string& how, const std::optional<BatchComparison>& comparison) {
  const BatchProgress& h = member.head;
  const std::optional<BatchProgress>& base = member.base;
  Outcome o;
  o.experiment = h.experiment;
  if (!base) {
    o.outcome = "undecided";
    o.reason = "no baseline batch of " + h.experiment + " at " + req.baseline + " (" +
               ShortSha(c.base_sha, kReportShaChars) + ") or an ancestor with the same inputs" +
               (how.empty() ? "" : ": " + how);
  } else if (comparison && comparison->unchanged) {
    // The same runs as the baseline: the commit did not change it.
    o.outcome = "pass";
    o.comparison = comparison;
    o.line = SpreadText(h) + " (" + how + "); " + ComparisonText(*comparison);
  } else if (h.active() || base->active()) {
    o.outcome = "undecided";
    o.may_change = true;
    o.reason = "runs unfinished: " + req.rev + " " + Progress(h) + ", baseline " +
               ShortSha(base->sha, kReportShaChars) + " " + Progress(*base);
  } else {
    const BatchComparison& cmp = *comparison;
    std::int64_t failed = h.count(RunState::kDead) + h.count(RunState::kFailed);
    if (h.values.size() < 2 || base->values.size() < 2) {
      o.outcome = "undecided";
      o.reason = "too few finished runs (" + std::to_string(h.values.size()) + " at " +
                 req.rev + ", " + std::to_string(base->values.size()) + " at the baseline" +
                 (failed ? ", " + std::to_string(failed) + " failed" : "") + ")";
    } else if (failed * 2 > static_cast<std::int64_t>(h.values.size()) + failed) {
      o.outcome = "undecided";
      o.reason = "too many runs failed (" + std::to_string(failed) + " of " +
                 std::to_string(h.values.size() + failed) + ")";
    } else if (cmp.verdict == stats::Verdict::kWorse) {
      o.outcome = "regression";
    } else if (cmp.verdict == stats::Verdict::kNotEnoughRuns) {
      o.outcome = "undecided";
      o.reason = "not enough runs to tell a change of min_effect from none";
    } else {
      o.outcome = "pass";
    }
    o.line = SpreadText(h) + " vs " + SpreadText(*base) + " (" +
             ShortSha(base->sha, kReportShaChars) + ", " + how + "); " + ComparisonText(cmp);
    o.comparison = cmp;
  }
  std::string mark = o.outcome == "pass" ? "✓  " : o.outcome == "regression" ? "✗  " : "?  ";
  o.line = mark + h.experiment + ": " +
           (o.line.empty() ? o.reason : o.line + (o.reason.empty() ? "" : "; " + o.reason));
  if (h.reuses_batch_id) o.line += " [" + ReuseText(h) + "]";
  return o;
}

// An experiment asked for with no batch at the head: passed when the head's
// push changed no experiment (`quiet`), else undecided.
Outcome MissingExperiment(const GateRequest& req, const GateCommits& c, const std::string& name,
                          const std::string& quiet) {
  Outcome o;
  o.experiment = name;
  if (!quiet.empty()) {
    o.outcome = "pass";
    o.reason = "no experiment changed at " + req.rev + " (" +
               ShortSha(c.head_sha, kReportShaChars) + "): " + quiet;
    o.line = "✓  " + name + ": " + o.reason;
    return o;
  }
  o.outcome = "undecided";
  o.may_change = true;
  o.reason = !c.head_missing.empty()
                 ? "no batch of " + name + ": " + c.head_missing
                 : "no batch of " + name + " at " + req.rev + " (" +
                       ShortSha(c.head_sha, kReportShaChars) +
                       "): not submitted, or its push is not processed yet";
  o.line = "?  " + name + ": " + o.reason;
  return o;
}

// The printed decision: each outcome's line, then the verdict and the
// family's correction; sets exit_code and finished. Returns the decision.
std::string GateText(const GateRequest& req, const GateCommits& c,
                     const std::vector<Outcome>& outcomes, const std::string& quiet,
                     const std::vector<std::optional<BatchComparison>>& comparisons,
                     int family_size, GateDecision& d) {
  int regressions = 0, undecided = 0;
  bool any_change = false;
  for (const auto& o : outcomes) {
    if (o.outcome == "regression") ++regressions;
    if (o.outcome == "undecided") ++undecided;
    if (o.may_change) any_change = true;
  }
  const bool nothing_to_judge = outcomes.empty() && !quiet.empty();
  if (nothing_to_judge) {
    d.text = "✓  no experiment changed at " + req.rev + " (" +
             ShortSha(c.head_sha, kReportShaChars) + "): " + quiet + "\n";
  } else if (outcomes.empty()) {
    any_change = true;
    ++undecided;
    d.text = "?  " + NoBatchReason(req, c) + "\n";
  }
  for (const auto& o : outcomes) d.text += o.line + "\n";
  std::string decision;
  if (regressions) {
    d.exit_code = kGateRegression;
    decision = "regression";
    d.text += std::to_string(regressions) + " experiment" + (regressions == 1 ? "" : "s") +
              " significantly worse than " + req.baseline + "\n";
  } else if (undecided) {
    d.exit_code = kGateUndecided;
    decision = "undecided";
    d.text += "undecided: " + std::to_string(undecided) + " experiment" +
              (undecided == 1 ? "" : "s") + " could not be compared with " + req.baseline + "\n";
  } else if (nothing_to_judge) {
    d.exit_code = kGatePass;
    decision = "pass";
    d.text += "nothing to judge: no experiment changed\n";
  } else {
    d.exit_code = kGatePass;
    decision = "pass";
    d.text += "no significant regression against " + req.baseline + "\n";
  }
  d.finished = !any_change;
  std::string corr;
  for (const auto& cmp : comparisons) {
    if (cmp && !(corr = CorrectionText(*cmp)).empty()) break;
  }
  if (!corr.empty()) {
    bool uncorrected = false;
    for (const auto& cmp : comparisons) {
      if (cmp && cmp->correction == stats::Correction::kNone) uncorrected = true;
    }
    d.text += uncorrected ? "verdicts not corrected for the " + std::to_string(family_size) +
                                " experiments (correction: none)\n"
                          : "verdicts corrected for " + std::to_string(family_size) +
                                " experiments at once: " + corr + "\n";
  }
  return decision;
}

}  // namespace

Result<GateDecision> DecideGate(Store& store, const GateRequest& req) {
  ASSIGN_OR_RETURN(auto commits, ResolveGateCommits(req));
  ASSIGN_OR_RETURN(auto heads, store.runs().BatchesForCommit(commits.head_sha));
  std::set<std::string> shas;
  for (const auto& b : heads) shas.insert(b.sha);
  if (shas.size() > 1) {
    return Fail(ErrorKind::kInvalidArgument, "commit id '" + req.rev + "' is ambiguous: give more digits");
  }
  // A processed push that touched no experiment here: nothing to judge.
  std::string quiet;
  if (commits.head_sha.size() >= 4) {
    ASSIGN_OR_RETURN(auto q, store.pushes().QuietCommits(commits.head_sha));
    if (!q.empty()) quiet = q.front().note;
  }
  std::set<std::string> wanted(req.experiments.begin(), req.experiments.end());
  std::set<std::string> seen;
  // First each experiment's baseline, then the comparisons, corrected over
  // the family: every experiment REV changed, whichever -e gates (the same
  // regression gets the same answer with or without -e; an unchanged one,
  // the same runs as its baseline, does not count).
  std::vector<FamilyMember> family;
  std::vector<std::string> hows;
  std::vector<bool> gated_member;
  for (const auto& h : heads) {
    if (IsReproExperiment(h.experiment)) continue;  // a determinism check, read with h's experiment
    // A sweep's point is not a change of REV: gated only when asked for.
    if (IsSweepPointExperiment(h.experiment) && !wanted.count(h.experiment)) continue;
    const bool gate_it = wanted.empty() || wanted.count(h.experiment);
    if (gate_it) seen.insert(h.experiment);
    ASSIGN_OR_RETURN(auto baseline, GateBaseline(store, commits, h));
    FamilyMember member;
    member.head = h;
    member.base = std::move(baseline.first);
    // A side that is not reproducible for a fixed seed is compared unpaired.
    ASSIGN_OR_RETURN(member.repro, ReproOf(store, h));
    if (member.base) {
      ASSIGN_OR_RETURN(member.base_repro, ReproOf(store, *member.base));
    }
    family.push_back(std::move(member));
    hows.push_back(std::move(baseline.second));
    gated_member.push_back(gate_it);
  }
  size_t at_rev = family.size();
  for (const auto& name : wanted) {
    if (!seen.count(name)) family.push_back({});  // missing: p = 1 in the family
  }
  auto comparisons = CompareFamily(family, /*compare_running=*/false, req.correction);
  std::vector<Outcome> outcomes;
  std::vector<std::optional<BatchComparison>> gated_comparisons;
  for (size_t i = 0; i < at_rev; ++i) {
    if (!gated_member[i]) continue;
    outcomes.push_back(JudgeGated(req, commits, family[i], hows[i], comparisons[i]));
    gated_comparisons.push_back(comparisons[i]);
  }
  // With -e, a changed experiment not gated but still running can still
  // lower the others' adjusted p: their pass is not an answer yet.
  int others_running = 0;
  for (size_t i = 0; i < at_rev; ++i) {
    const auto& m = family[i];
    if (gated_member[i] || m.unchanged()) continue;
    if (m.head.active() || (m.base && m.base->active())) ++others_running;
  }
  if (others_running > 0 &&
      req.correction.value_or(CorrectionOf(family.front().head)) != stats::Correction::kNone) {
    for (auto& o : outcomes) {
      if (o.outcome != "pass" || !o.comparison || o.comparison->unchanged) continue;
      o.outcome = "undecided";
      o.may_change = true;
      o.reason = "waiting for " + std::to_string(others_running) + " other experiment" +
                 (others_running == 1 ? "" : "s") + " " + req.rev + " changed (" +
                 CorrectionText(*o.comparison) + ")";
      o.line = "?  " + o.line.substr(o.line.find(' ') + 2) + "; " + o.reason;
    }
  }
  for (const auto& name : wanted) {
    if (!seen.count(name)) outcomes.push_back(MissingExperiment(req, commits, name, quiet));
  }

  GateDecision d;
  const int family_size = FamilySize(family);
  const std::string decision =
      GateText(req, commits, outcomes, quiet, gated_comparisons, family_size, d);
  const bool nothing_to_judge = outcomes.empty() && !quiet.empty();
  nlohmann::json exps = nlohmann::json::array();
  for (const auto& o : outcomes) {
    nlohmann::json e = {{"experiment", o.experiment}, {"outcome", o.outcome}, {"reason", o.reason}};
    e["comparison"] = o.comparison ? ComparisonJson(*o.comparison) : nlohmann::json(nullptr);
    exps.push_back(e);
  }
  d.json = {{"decision", decision},
            {"exit_code", d.exit_code},
            {"rev", req.rev},
            {"sha", commits.head_sha},
            {"baseline", req.baseline},
            {"baseline_sha", commits.baseline_sha},
            {"base_sha", commits.base_sha},
            {"finished", d.finished},
            {"experiments", exps},
            {"no_experiment_changed", nothing_to_judge},
            {"commit_missing", commits.head_missing.empty() ? nlohmann::json(nullptr)
                                                            : nlohmann::json(commits.head_missing)},
            {"correction",
             {{"method", std::string(stats::CorrectionName(
                             req.correction.value_or(family.empty() || at_rev == 0
                                                         ? stats::Correction::kHolm
                                                         : CorrectionOf(family.front().head))))},
              {"family_size", family_size}}}};
  return d;
}

}  // namespace trainq
