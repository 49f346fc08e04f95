// `trainq gate REV --baseline BRANCH`: may REV merge? One decision per
// experiment, three outcomes, never a pass for what could not be decided.
//
//   0  no regression: every experiment at REV was compared and none is worse;
//   1  regression: at least one experiment is significantly worse;
//   3  undecided: no regression seen, but some experiment could not be
//      decided (no batch at REV, no baseline batch, runs unfinished, too many
//      runs failed, too few runs for a test). A REV with no batch that the
//      repository does not have either is said so ("commit 1a2b3c4 is not in
//      the mirror of acme/model: ..."), never with git's own message.
// (2 is left to errors: a bad option, an unreadable store or server.)
//
// The experiments REV changed are one family, whichever of them -e gates:
// their verdicts are corrected together (Holm unless trainq.yaml or
// --correction says otherwise), and the text says which correction and over
// how many. An experiment whose batch at REV holds the very runs of its
// baseline (reused, unchanged) passes and is not counted
// (analysis.h FamilySize).
//
// The baseline of experiment X is X at the merge base of REV and BRANCH, else
// at the nearest ancestor of it with the same inputs for X (agent/results/baseline.h);
// when REV's batch recorded its baseline against that same base, that one.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "queue/types.h"
#include "stats/multiple.h"

namespace trainq {

class Store;

inline constexpr int kGatePass = 0;
inline constexpr int kGateRegression = 1;
inline constexpr int kGateUndecided = 3;

struct GateRequest {
  std::string rev = "HEAD";
  std::string baseline = "main";
  std::string repo_dir;  // a git repository to resolve names and walk history in ("" = none)
  std::vector<std::string> experiments;  // empty: every experiment at REV
  // The family correction over the experiments gated (empty: the one their
  // trainq.yaml asks for, holm by default).
  std::optional<stats::Correction> correction;
  // Non-empty when repo_dir is `trainq serve`'s mirror of this repository
  // (owner/name): a REV missing from it is one serve has not fetched yet.
  std::string mirror_of;
};

struct GateDecision {
  int exit_code = kGateUndecided;
  std::string text;     // what `trainq gate` prints
  nlohmann::json json;  // what `trainq gate --json` prints
  // False while waiting could change the answer (REV not submitted yet, runs
  // still queued or running on either side); `--wait` polls until true.
  bool finished = true;
};

Result<GateDecision> DecideGate(Store& store, const GateRequest& req);

}  // namespace trainq
