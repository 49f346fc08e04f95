// Pull request comments: the verdict on a pull request's head, as ONE comment
// on the forge, created once and then edited in place whenever a batch of the
// head (or of its baseline) changes state, and on each new push to the pull
// request (GitHub, Gitea: issue comments; GitLab: merge request notes).
//
// The wanted body lives in the store (pr_comments), with the forge's comment
// id, the hash of the body last accepted, and a backoff like commit statuses,
// so a restart neither loses an update nor posts a second comment. The
// reporter runs on the server's status thread with that thread's Store.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/results/analysis.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/pushes.h"
#include "queue/store.h"
#include "stats/multiple.h"

namespace trainq {

// What the comment shows: the head's batches, each with its baseline
// (ParentBatch) when the store has one.
struct PrCommentView {
  std::string forge;  // github | gitlab | gitea
  std::int64_t pr_number = 0;
  std::string head_sha;
  std::string target_branch;
  std::string push_result;  // what the push queued or why nothing ran
  std::vector<std::pair<BatchProgress, std::optional<BatchProgress>>> experiments;
  std::string report_url;  // "" = no link
  // The head's dashboard page (forge_status.h CommitPageUrl: public_url +
  // "/commit/SHA"); "" = no public_url, no link.
  std::string commit_url;
  // The family correction over `experiments` (empty: what their trainq.yaml
  // says, holm by default).
  std::optional<stats::Correction> correction;
  // Determinism checks of the batches shown (head and base), by batch id.
  std::map<std::int64_t, ReproCheck> repro;
};

// The comment's markdown: one table per experiment (base and head mean ± sd
// and n; the difference with the interval the verdict used (95%, or widened
// in a family: "97.5% CI"), the test with the raw and adjusted p, and the
// verdict once both sides have ended), then the family's correction and the
// link to the head's dashboard page. Deterministic: the same view gives the
// same bytes.
std::string RenderPrComment(const PrCommentView& view);
// Whether nothing the view shows can still change: no run left on either side.
bool PrCommentSettled(const PrCommentView& view);

struct PrCommentOptions {
  TimeMs retry_base_ms = 5'000;          // 5 s, 10 s, 20 s, ... after a failed post
  int max_attempts = 5;                  // then given up until the body changes
  TimeMs min_edit_interval_ms = 10'000;  // between edits while runs are still going
  int render_limit = 50;                 // pull requests looked at per step
};

class PrCommentReporter {
 public:
  // `data_dir` locates the mirrors, whose paths the batches carry.
  PrCommentReporter(Store& store, const ServerConfig& config, HttpClient& http, const Clock& clock,
                    std::string data_dir, PrCommentOptions options = {});
  // Renders the comments that may have changed, then creates or edits the
  // ones that are due. Returns how many posts were tried.
  Result<int> Step();

 private:
  Status Render(const RepoConfig& repo, const Pushes::Push& push);
  Status Post(const RepoConfig& repo, const Pushes::PrComment& c);

  Store& store_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  std::string data_dir_;
  PrCommentOptions options_;
};

}  // namespace trainq
