#include "agent/results/baseline.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "core/strings.h"
#include "agent/repo/mirror.h"
#include "agent/results/analysis.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

namespace fs = std::filesystem;

// The manifest at `sha`; nullopt when the commit has no (readable) trainq.yaml.
std::optional<Manifest> ManifestAt(GitRepo& git, const std::string& sha) {
  auto text = git.ReadFile(sha, kManifestName);
  if (!text) return std::nullopt;
  auto parsed = ParseManifest(*text, kManifestName);
  if (!parsed) return std::nullopt;
  return std::move(*parsed);
}

}  // namespace

Result<BaselineSearch> FindEquivalentBatch(Store& store, const std::string& git_dir,
                                           const std::string& repo_url,
                                           const std::string& experiment,
                                           const std::string& base_sha, int max_steps) {
  BaselineSearch out;
  std::string gd = GitDirOf(git_dir);
  std::error_code ec;
  if (!fs::exists(fs::path(gd) / "HEAD", ec)) {
    return Fail(ErrorKind::kNotFound, git_dir + ": not a git repository");
  }
  ASSIGN_OR_RETURN(auto git, GitRepo::Open(gd));
  std::string c = base_sha;
  std::optional<Manifest> manifest_c = ManifestAt(git, c);
  for (int step = 0;; ++step) {
    ASSIGN_OR_RETURN(auto found, BatchOfExperimentAt(store, repo_url, experiment, c));
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
        if (t.experiment == experiment) changed = true;
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

Result<std::optional<ReusableBatch>> FindReusableBatch(Store& store, const std::string& git_dir,
                                                       const std::string& repo_url,
                                                       const BatchSpec& spec,
                                                       const std::string& sha, int max_steps) {
  ASSIGN_OR_RETURN(auto search,
                   FindEquivalentBatch(store, git_dir, repo_url, spec.experiment, sha, max_steps));
  if (!search.batch || search.steps == 0) return std::optional<ReusableBatch>();
  const BatchProgress& b = *search.batch;
  bool same = b.spec_json == spec.spec_json && b.seed_start == spec.seed_start &&
              b.repeats >= spec.repeats;
  bool ended_empty = !b.active() && b.values.empty();
  if (!same || ended_empty) return std::optional<ReusableBatch>();
  return std::optional<ReusableBatch>(ReusableBatch{b, search.at_sha, search.steps});
}

std::string ReuseText(const BatchProgress& b) {
  if (!b.reuses_batch_id) return "";
  return "reused batch " + std::to_string(*b.reuses_batch_id) + " of " +
         ShortSha(b.reused_from_sha, kReportShaChars) + " (same inputs)";
}

Result<std::string> ChooseBaseline(Store& store, const std::string& git_dir,
                                   const BatchProgress& head, const std::string& base_sha,
                                   TimeMs now, BaselineOptions options) {
  auto record = [&](std::optional<std::int64_t> id, std::string note) -> Result<std::string> {
    TRY(store.runs().SetBaseline(head.id, base_sha, id, note));
    return note;
  };
  if (base_sha.empty()) return record(std::nullopt, "no base commit: nothing to compare with");
  if (base_sha == head.sha) return record(std::nullopt, "the base is the commit itself");
  std::string mode = "auto";
  if (auto j = nlohmann::json::parse(head.spec_json.empty() ? "{}" : head.spec_json, nullptr, false);
      j.is_object() && j.contains("baseline") && j["baseline"].is_string()) {
    mode = j["baseline"].get<std::string>();
  }
  if (mode == "off") return record(std::nullopt, "baseline: off");

  ASSIGN_OR_RETURN(auto search, FindEquivalentBatch(store, git_dir, head.repo_url, head.experiment,
                                                    base_sha, options.max_steps));
  if (search.batch && head.reuses_batch_id &&
      search.batch->reuses_batch_id.value_or(search.batch->id) == *head.reuses_batch_id) {
    // The base has the very runs this batch reuses: comparing them with
    // themselves says nothing. It is compared as the batch it reuses is.
    ASSIGN_OR_RETURN(auto source, store.runs().Batch(*head.reuses_batch_id));
    if (source && source->baseline_batch_id) {
      std::string note = "as batch " + std::to_string(source->id) + " (the same runs): " +
                         BaselineText(*source);
      TRY(store.runs().SetBaseline(head.id, source->base_sha, source->baseline_batch_id, note));
      return note;
    }
    return record(std::nullopt, "the same runs as batch " + std::to_string(*head.reuses_batch_id) +
                                    " at the base " + ShortSha(base_sha, kReportShaChars) + ": nothing to compare");
  }
  if (search.batch) {
    std::string note =
        search.steps == 0
            ? "batch " + std::to_string(search.batch->id) + " at the base " + ShortSha(base_sha, kReportShaChars)
            : "batch " + std::to_string(search.batch->id) + " at " + ShortSha(search.at_sha, kReportShaChars) + ", " +
                  std::to_string(search.steps) + " commit" + (search.steps == 1 ? "" : "s") +
                  " before the base " + ShortSha(base_sha, kReportShaChars) + " with the same inputs";
    return record(search.batch->id, note);
  }
  if (mode == "reuse" || !options.queue_missing) {
    return record(std::nullopt, "no batch of " + head.experiment + " at the base " +
                                    ShortSha(base_sha, kReportShaChars) + " or an equivalent ancestor (" +
                                    search.stopped + ")");
  }
  // Queue one at the base, with the head's seeds so that the comparison pairs.
  ASSIGN_OR_RETURN(auto git, GitRepo::Open(GitDirOf(git_dir)));
  auto manifest = ManifestAt(git, base_sha);
  const Experiment* e = manifest ? manifest->Find(head.experiment) : nullptr;
  if (!e) {
    return record(std::nullopt, "new experiment: the base " + ShortSha(base_sha, kReportShaChars) +
                                    " does not define " + head.experiment);
  }
  if (auto why = e->NoPlainBatch()) return record(std::nullopt, "at the base: " + *why);
  BatchSpec spec = e->ToBatchSpec("baseline for " + ShortSha(head.sha, kReportShaChars) + " (batch " +
                                  std::to_string(head.id) + "): no batch of " + head.experiment +
                                  " at " + ShortSha(base_sha, kReportShaChars) + " or an ancestor with its inputs");
  spec.repeats = head.repeats;
  spec.seed_start = head.seed_start;
  {
    std::vector<BatchSpec> one = {spec};
    TRY(AddInputsFingerprints(git, base_sha, *manifest, one));
    spec = std::move(one.front());
  }
  ASSIGN_OR_RETURN(auto info, git.Resolve(base_sha));
  ASSIGN_OR_RETURN(auto results, store.runs().Submit(head.repo_url, info, {spec}, now));
  if (results.empty()) return Fail(ErrorKind::kInternal, "baseline batch not created");
  // The baseline batch itself is compared with nothing.
  TRY(store.runs().SetBaseline(results[0].batch_id, "", std::nullopt,
                        "baseline queued for batch " + std::to_string(head.id)));
  return record(results[0].batch_id, "batch " + std::to_string(results[0].batch_id) +
                                         " queued at the base " + ShortSha(base_sha, kReportShaChars) +
                                         " with the same seeds");
}

}  // namespace trainq
