// The experiment page's history along one branch: an experiment's batches in
// the order of a branch's first-parent history, one point per commit (its
// newest batch), read from the repository the batches came from (their
// repo_url: serve's mirror, or the work tree `trainq submit` ran in), cut to
// the one page the page shows. Only batch keys are read for the whole
// history (RunQueue::ExperimentBatchKeys); the caller reads and compares the
// page's batches alone, so a page costs the same at 10 commits or 5,000.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "queue/store.h"

namespace trainq {

// How many commits of a branch the history walks back at most.
inline constexpr size_t kBranchHistoryCommits = 5000;
// Points per page: the page's default, and the most a request may ask.
inline constexpr size_t kHistoryPerPage = 40;
inline constexpr size_t kHistoryMaxPerPage = 500;

// One repository's part of an experiment's history, one page of it.
struct HistoryPage {
  std::string repo_url;
  std::vector<std::int64_t> batch_ids;  // the page's points, oldest first
  std::optional<std::int64_t> before;   // the point just older than the page
  std::int64_t newest = 0;              // the repository's newest batch of it
  // A batch that reused the runs of another point along the branch is no
  // point of its own: its commit is listed here, under the batch that ran
  // them (shown once, where they ran).
  std::map<std::int64_t, std::vector<std::string>> reused_at;
  // {"order": "branch", "branch", "branches", "on_branch", "off_branch",
  // "walked", "truncated"}, or {"order": "created", "note"} when the
  // repository cannot be read here (every batch, in creation order); both
  // with "points", "page" (0: the newest), "pages" and "per_page".
  nlohmann::json history;
};

// `experiment`'s history on `branch` ("" = each repository's default
// branch), page `page` of `per_page` points, newest page first; a page past
// the end is the oldest one. One HistoryPage per repository the experiment's
// batches came from, by location. kNotFound when `branch` was named and no
// repository has it.
Result<std::vector<HistoryPage>> HistoryPages(Store& store, const std::string& experiment,
                                              const std::string& branch, size_t page,
                                              size_t per_page,
                                              size_t max_commits = kBranchHistoryCommits);

}  // namespace trainq
