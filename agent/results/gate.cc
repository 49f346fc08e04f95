#include "agent/results/gate.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <set>

#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "core/strings.h"

namespace trainq {

namespace {

std::string Short(const std::string& sha) { return sha.substr(0, 7); }

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

}  // namespace

Result<GateDecision> DecideGate(Store& store, const GateRequest& req) {
  ASSIGN_OR_RETURN(std::string head_sha, ResolveRevision(req.rev, req.repo_dir));
  ASSIGN_OR_RETURN(std::string baseline_sha, ResolveRevision(req.baseline, req.repo_dir));
  bool have_git = false;
  std::string base_sha = baseline_sha;
  if (!req.repo_dir.empty() && head_sha.size() == 40 && baseline_sha.size() == 40 &&
      GitRepo::Open(req.repo_dir)) {
    auto mirror = Mirror::Open(GitDirOf(req.repo_dir), "");
    if (mirror) {
      have_git = true;
      ASSIGN_OR_RETURN(auto mb, mirror->MergeBase(head_sha, baseline_sha));
      if (mb) base_sha = *mb;
    }
  }

  ASSIGN_OR_RETURN(auto heads, store.runs().BatchesForCommit(head_sha));
  std::set<std::string> shas;
  for (const auto& b : heads) shas.insert(b.sha);
  if (shas.size() > 1) {
    return Fail(ErrorKind::kInvalidArgument, "commit id '" + req.rev + "' is ambiguous: give more digits");
  }
  // A processed push that touched no experiment here: nothing to judge.
  std::string quiet;
  if (head_sha.size() >= 4) {
    ASSIGN_OR_RETURN(auto q, store.pushes().QuietCommits(head_sha));
    if (!q.empty()) quiet = q.front().note;
  }
  std::set<std::string> wanted(req.experiments.begin(), req.experiments.end());
  std::vector<Outcome> outcomes;
  std::set<std::string> seen;
  // First each experiment's baseline, then the comparisons, corrected over
  // the family of every experiment gated.
  std::vector<FamilyMember> family;
  std::vector<std::string> hows;
  for (const auto& h : heads) {
    if (!wanted.empty() && !wanted.count(h.experiment)) continue;
    if (IsReproExperiment(h.experiment)) continue;  // a determinism check, read with h's experiment
    seen.insert(h.experiment);
    // The baseline batch.
    std::optional<BatchProgress> base;
    std::string how;
    if (base_sha == h.sha || (!h.base_sha.empty() && h.base_sha.starts_with(base_sha)) ||
        (!h.base_sha.empty() && base_sha.size() == 40 && h.base_sha == base_sha)) {
      ASSIGN_OR_RETURN(base, ParentBatch(store, h));
      how = BaselineText(h);
    } else if (have_git) {
      ASSIGN_OR_RETURN(auto found, FindEquivalentBatch(store, req.repo_dir, h.repo_url,
                                                       h.experiment, base_sha));
      base = found.batch;
      if (found.batch) {
        how = found.steps == 0 ? "at " + Short(base_sha)
                               : "at " + Short(found.at_sha) + ", " + std::to_string(found.steps) +
                                     " commits before " + Short(base_sha) + " with the same inputs";
      } else {
        how = found.stopped;
      }
    } else {
      ASSIGN_OR_RETURN(auto candidates, store.runs().BatchesForCommit(base_sha));
      for (auto& c : candidates) {
        if (c.experiment == h.experiment && c.repo_url == h.repo_url) base = c;
      }
      how = "at " + Short(base_sha);
    }
    FamilyMember member;
    member.head = h;
    member.base = std::move(base);
    // A side that is not reproducible for a fixed seed is compared unpaired.
    ASSIGN_OR_RETURN(member.repro, ReproOf(store, h));
    if (member.base) {
      ASSIGN_OR_RETURN(member.base_repro, ReproOf(store, *member.base));
    }
    family.push_back(std::move(member));
    hows.push_back(std::move(how));
  }
  size_t gated = family.size();
  for (const auto& name : wanted) {
    if (!seen.count(name)) family.push_back({});  // missing: p = 1 in the family
  }
  auto comparisons = CompareFamily(family, /*compare_running=*/false, req.correction);
  for (size_t i = 0; i < gated; ++i) {
    const BatchProgress& h = family[i].head;
    const std::optional<BatchProgress>& base = family[i].base;
    const std::string& how = hows[i];
    Outcome o;
    o.experiment = h.experiment;
    if (!base) {
      o.outcome = "undecided";
      o.reason = "no baseline batch of " + h.experiment + " at " + req.baseline + " (" +
                 Short(base_sha) + ") or an ancestor with the same inputs" +
                 (how.empty() ? "" : ": " + how);
    } else if (h.active() || base->active()) {
      o.outcome = "undecided";
      o.may_change = true;
      o.reason = "runs unfinished: " + req.rev + " " + Progress(h) + ", baseline " +
                 Short(base->sha) + " " + Progress(*base);
    } else {
      const BatchComparison& c = *comparisons[i];
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
      } else if (c.verdict == stats::Verdict::kWorse) {
        o.outcome = "regression";
      } else if (c.verdict == stats::Verdict::kNotEnoughRuns) {
        o.outcome = "undecided";
        o.reason = "not enough runs to tell a change of min_effect from none";
      } else {
        o.outcome = "pass";
      }
      o.line = SpreadText(h) + " vs " + SpreadText(*base) + " (" + Short(base->sha) + ", " +
               how + "); " + ComparisonText(c);
      o.comparison = c;
    }
    std::string mark = o.outcome == "pass" ? "✓  " : o.outcome == "regression" ? "✗  " : "?  ";
    o.line = mark + h.experiment + ": " +
             (o.line.empty() ? o.reason : o.line + (o.reason.empty() ? "" : "; " + o.reason));
    if (h.reuses_batch_id) o.line += " [" + ReuseText(h) + "]";
    outcomes.push_back(std::move(o));
  }

  GateDecision d;
  bool any_change = false;
  for (const auto& name : wanted) {
    if (seen.count(name)) continue;
    Outcome o;
    o.experiment = name;
    if (!quiet.empty()) {
      o.outcome = "pass";
      o.reason = "no experiment changed at " + req.rev + " (" + Short(head_sha) + "): " + quiet;
      o.line = "✓  " + name + ": " + o.reason;
      outcomes.push_back(std::move(o));
      continue;
    }
    o.outcome = "undecided";
    o.may_change = true;
    o.reason = "no batch of " + name + " at " + req.rev + " (" + Short(head_sha) +
               "): not submitted, or its push is not processed yet";
    o.line = "?  " + name + ": " + o.reason;
    outcomes.push_back(std::move(o));
  }
  int regressions = 0, undecided = 0;
  for (const auto& o : outcomes) {
    if (o.outcome == "regression") ++regressions;
    if (o.outcome == "undecided") ++undecided;
    if (o.may_change) any_change = true;
  }
  bool nothing_to_judge = outcomes.empty() && !quiet.empty();
  if (nothing_to_judge) {
    d.text = "✓  no experiment changed at " + req.rev + " (" + Short(head_sha) + "): " + quiet +
             "\n";
  } else if (outcomes.empty()) {
    any_change = true;
    ++undecided;
    d.text = "?  no batch at " + req.rev + " (" + Short(head_sha) +
             "): not submitted, or its push is not processed yet\n";
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
  for (const auto& c : comparisons) {
    if (c && !(corr = CorrectionText(*c)).empty()) break;
  }
  auto FamilyLine = [&](const auto& cs, size_t n) {
    for (const auto& c : cs) {
      if (c && c->correction == stats::Correction::kNone) {
        return "verdicts not corrected for the " + std::to_string(n) +
               " experiments (correction: none)\n";
      }
    }
    return "verdicts corrected for " + std::to_string(n) + " experiments at once: " + corr + "\n";
  };
  if (!corr.empty()) d.text += FamilyLine(comparisons, family.size());
  nlohmann::json exps = nlohmann::json::array();
  for (const auto& o : outcomes) {
    nlohmann::json e = {{"experiment", o.experiment}, {"outcome", o.outcome}, {"reason", o.reason}};
    e["comparison"] = o.comparison ? ComparisonJson(*o.comparison) : nlohmann::json(nullptr);
    exps.push_back(e);
  }
  d.json = {{"decision", decision},   {"exit_code", d.exit_code}, {"rev", req.rev},
            {"sha", head_sha},        {"baseline", req.baseline}, {"baseline_sha", baseline_sha},
            {"base_sha", base_sha},   {"finished", d.finished},   {"experiments", exps},
            {"no_experiment_changed", nothing_to_judge},
            {"correction",
             {{"method", std::string(stats::CorrectionName(
                             req.correction.value_or(family.empty() || gated == 0
                                                         ? stats::Correction::kHolm
                                                         : CorrectionOf(family.front().head))))},
              {"family_size", family.size()}}}};
  return d;
}

}  // namespace trainq
