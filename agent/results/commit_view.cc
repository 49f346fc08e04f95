// What `trainq show COMMIT --json` prints and the dashboard's commit page
// reads (agent/results/commit_view.h).
#include "agent/results/commit_view.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/status.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "stats/summary.h"

using nlohmann::json;

namespace trainq {

namespace {

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
  // The test-set noise floor beside the seed sd, when the runs reported
  // their evaluation set size.
  if (auto floor = NoiseFloorJson(b); !floor.is_null()) summary["noise_floor"] = std::move(floor);
  return {{"runs", total}, {"counts", counts}, {"values", b.values}, {"summary", summary}};
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
  // Only the commits with this prefix (a range on commits_by_sha): reading
  // every batch and filtering here grew with the whole history.
  ASSIGN_OR_RETURN(auto batches, store.runs().BatchesForCommit(prefix));
  std::set<std::string> shas;
  for (const auto& b : batches) shas.insert(b.sha);
  ASSIGN_OR_RETURN(auto pushes, store.pushes().PushesForCommit(prefix));
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
    // The family itself: what the commit changed (its size is the m of the
    // correction), and what it did not (reused, unchanged: shown, not counted).
    json members = json::array(), unchanged = json::array();
    std::string text;
    for (size_t i = 0; i < family.size(); ++i) {
      (family[i].unchanged() ? unchanged : members).push_back(family[i].head.experiment);
      if (comparisons[i] && text.empty()) text = CorrectionText(*comparisons[i]);
    }
    stats::Correction method = family.empty() ? stats::Correction::kHolm
                                               : CorrectionOf(family.front().head);
    j["family"] = {{"method", std::string(stats::CorrectionName(method))},
                   {"size", FamilySize(family)},
                   {"text", text},
                   {"experiments", members},
                   {"unchanged", unchanged}};
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
    auto found = corrected.find(b.id);
    if (parent && (found != corrected.end() ? found->second.unchanged : SameRuns(b, *parent))) {
      // Reused unchanged: the runs of its baseline; shown, not compared.
      bj["unchanged"] = {{"batch", b.reuses_batch_id.value_or(b.id)},
                         {"commit", b.reused_from_sha.empty() ? b.sha : b.reused_from_sha},
                         {"baseline_batch", parent->id},
                         {"baseline_sha", parent->sha},
                         {"text", ComparisonText(CompareBatches(b, *parent))}};
      bj["baseline_note"] = BaselineText(b);
    } else if (parent) {
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
      ASSIGN_OR_RETURN(auto runs, store.runs().Runs(b.id, std::nullopt, 0));
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
    ASSIGN_OR_RETURN(auto status, store.pushes().GetCommitStatus(b.id));
    if (status) {
      bj["forge_status"] = {{"context", status->context},
                            {"wanted", status->state},
                            {"posted", status->posted_state},
                            {"description", status->description},
                            {"gave_up", status->gave_up},
                            {"error", status->last_error}};
    }
    // Every run with its state, attempts and last error (the dashboard's
    // runs table); a reusing batch's are the batch it reuses.
    ASSIGN_OR_RETURN(auto all_runs, store.runs().Runs(b.reuses_batch_id.value_or(b.id), std::nullopt, 0));
    bj["runs"] = json::array();
    for (const auto& r : all_runs) bj["runs"].push_back(RunJson(r));
    j["batches"].push_back(bj);
  }
  j["pushes"] = json::array();
  for (const auto& p : pushes) {
    // What the push posted for the commit itself (a push that ran nothing:
    // "no watched path or experiment changed"), besides its batches' statuses.
    ASSIGN_OR_RETURN(auto posted, store.pushes().GetPushStatuses(p.id));
    json statuses = json::array();
    for (const auto& s : posted) {
      statuses.push_back({{"context", s.context},
                          {"wanted", s.state},
                          {"posted", s.posted_state},
                          {"description", s.description}});
    }
    j["pushes"].push_back({{"statuses", statuses},
                           {"id", p.id},
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

}  // namespace trainq
