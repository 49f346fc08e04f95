#include "agent/results/baseline.h"

#include <nlohmann/json.hpp>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "core/strings.h"
#include "agent/results/analysis.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

// The manifest at `sha`; nullopt when the commit has no (readable) trainq.yaml.
std::optional<Manifest> ManifestAt(GitRepo& git, const std::string& sha) {
  auto text = git.ReadFile(sha, kManifestName);
  if (!text) return std::nullopt;
  auto parsed = ParseManifest(*text, kManifestName);
  if (!parsed) return std::nullopt;
  return std::move(*parsed);
}

// The "inputs" fingerprint a batch was submitted with (change_detect.h
// InputsFingerprint), "" when it has none (a batch from before them).
std::string StoredInputs(const BatchProgress& b) {
  auto j = nlohmann::json::parse(b.spec_json.empty() ? "{}" : b.spec_json, nullptr, false);
  if (!j.is_object() || !j.contains("inputs") || !j["inputs"].is_string()) return "";
  return j["inputs"].get<std::string>();
}

}  // namespace

Result<BaselineSearch> FindEquivalentBatch(Store& store, GitRepo& git,
                                           const std::string& repo_url,
                                           const std::string& experiment,
                                           const std::string& base_sha, int max_steps) {
  BaselineSearch out;
  std::string c = base_sha;
  std::optional<Manifest> manifest_c = ManifestAt(git, c);
  // "Same inputs" has one definition, the fingerprint (change_detect.h) that
  // reuse compares too and drift pools by: the walk below only finds the
  // candidate, whose stored fingerprint must equal the base's.
  std::string base_inputs;
  for (int step = 0;; ++step) {
    ASSIGN_OR_RETURN(auto found, BatchOfExperimentAt(store, repo_url, experiment, c));
    if (found && step > 0 && !StoredInputs(*found).empty()) {
      if (base_inputs.empty() && manifest_c) {
        ASSIGN_OR_RETURN(auto files, git.TreeFiles(base_sha));
        auto base_manifest = ManifestAt(git, base_sha);
        const Experiment* e = base_manifest ? base_manifest->Find(experiment) : nullptr;
        if (e) base_inputs = InputsFingerprint(*base_manifest, *e, files);
      }
      if (StoredInputs(*found) != base_inputs) {
        out.stopped = "batch " + std::to_string(found->id) + " at " +
                      ShortSha(c, kReportShaChars) + " ran other inputs of " + experiment;
        return out;
      }
    }
    if (found) {
      out.batch = std::move(found);
      out.at_sha = c;
      out.steps = step;
      return out;
    }
    if (step >= max_steps) {
      out.stopped = "searched " + std::to_string(max_steps) + " commits";
      return out;
    }
    if (!manifest_c || !manifest_c->Find(experiment)) {
      out.stopped = ShortSha(c, kReportShaChars) + " does not define " + experiment;
      return out;
    }
    ASSIGN_OR_RETURN(auto parent, git.FirstParent(c));
    if (!parent) {
      out.stopped = "reached the first commit";
      return out;
    }
    std::optional<Manifest> manifest_p = ManifestAt(git, *parent);
    ASSIGN_OR_RETURN(auto changes, git.Diff(*parent, c));
    bool changed = !manifest_p || !manifest_p->Find(experiment);
    if (!changed) {
      for (const auto& t : DetectChanges(changes, &*manifest_p, *manifest_c)) {
        if (t.experiment == experiment && t.inputs_changed) changed = true;
      }
    }
    if (changed) {
      out.stopped = ShortSha(c, kReportShaChars) + " changed " + experiment;
      return out;
    }
    c = *parent;
    manifest_c = std::move(manifest_p);
  }
}

Result<std::optional<ReusableBatch>> FindReusableBatch(Store& store, GitRepo& git,
                                                       const std::string& repo_url,
                                                       const BatchSpec& spec,
                                                       const std::string& sha, int max_steps) {
  ASSIGN_OR_RETURN(auto search,
                   FindEquivalentBatch(store, git, repo_url, spec.experiment, sha, max_steps));
  if (!search.batch || search.steps == 0) return std::optional<ReusableBatch>();
  const BatchProgress& b = *search.batch;
  // The same runs: equal inputs; how they are judged may differ (the new
  // batch takes the spec's, RunQueue::ReuseBatch).
  bool same = RunInputsJson(b.spec_json) == RunInputsJson(spec.spec_json) &&
              b.seed_start == spec.seed_start && b.repeats >= spec.repeats;
  bool ended_empty = !b.active() && b.values.empty();
  if (!same || ended_empty) return std::optional<ReusableBatch>();
  return std::optional<ReusableBatch>(ReusableBatch{b, search.at_sha, search.steps});
}

std::string ReuseText(const BatchProgress& b) {
  if (!b.reuses_batch_id) return "";
  return "reused batch " + std::to_string(*b.reuses_batch_id) + " of " +
         ShortSha(b.reused_from_sha, kReportShaChars) + " (same inputs)";
}

Result<BaselinePlan> PlanBaseline(Store& store, GitRepo& git, const BatchProgress& head,
                                  const std::string& base_sha, BaselineOptions options) {
  BaselinePlan plan;
  plan.base_sha = base_sha;
  auto none = [&](std::string note) {
    plan.note = std::move(note);
    return plan;
  };
  if (base_sha.empty()) return none("no base commit: nothing to compare with");
  if (base_sha == head.sha) return none("the base is the commit itself");
  std::string mode = "auto";
  if (auto j = nlohmann::json::parse(head.spec_json.empty() ? "{}" : head.spec_json, nullptr, false);
      j.is_object() && j.contains("baseline") && j["baseline"].is_string()) {
    mode = j["baseline"].get<std::string>();
  }
  if (mode == "off") return none("baseline: off");

  const std::string base = ShortSha(base_sha, kReportShaChars);
  ASSIGN_OR_RETURN(auto search, FindEquivalentBatch(store, git, head.repo_url, head.experiment,
                                                    base_sha, options.max_steps));
  if (search.batch && SameRuns(head, *search.batch)) {
    // The base has the very runs this batch reuses: the commit did not
    // change the experiment. The batch holding them is recorded as the
    // baseline, so that every reader sees the same runs on both sides
    // (SameRuns): shown as unchanged, never compared, never counted in the
    // commit's family (docs/STATISTICS.md).
    plan.batch_id = search.batch->id;
    return none("the same runs as batch " + std::to_string(head.reuses_batch_id.value_or(head.id)) +
                " at the base " + base + ": unchanged, nothing to compare");
  }
  if (search.batch) {
    plan.batch_id = search.batch->id;
    return none(search.steps == 0
                    ? "batch " + std::to_string(search.batch->id) + " at the base " + base
                    : "batch " + std::to_string(search.batch->id) + " at " +
                          ShortSha(search.at_sha, kReportShaChars) + ", " +
                          std::to_string(search.steps) + " commit" +
                          (search.steps == 1 ? "" : "s") + " before the base " + base +
                          " with the same inputs");
  }
  if (mode == "reuse" || !options.queue_missing) {
    return none("no batch of " + head.experiment + " at the base " + base +
                " or an equivalent ancestor (" + search.stopped + ")");
  }
  // One to queue at the base, with the head's seeds so that the comparison pairs.
  auto manifest = ManifestAt(git, base_sha);
  const Experiment* e = manifest ? manifest->Find(head.experiment) : nullptr;
  if (!e) return none("new experiment: the base " + base + " does not define " + head.experiment);
  if (auto why = e->NoPlainBatch()) return none("at the base: " + *why);
  BatchSpec spec = e->ToBatchSpec("baseline for " + ShortSha(head.sha, kReportShaChars) +
                                  " (batch " + std::to_string(head.id) + "): no batch of " +
                                  head.experiment + " at " + base +
                                  " or an ancestor with its inputs");
  spec.repeats = head.repeats;
  spec.seed_start = head.seed_start;
  std::vector<BatchSpec> one = {spec};
  TRY(AddInputsFingerprints(git, base_sha, *manifest, one));
  plan.queue = std::move(one.front());
  ASSIGN_OR_RETURN(plan.base, git.Resolve(base_sha));
  return plan;
}

}  // namespace trainq
