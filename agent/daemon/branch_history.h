// The experiment page's history along one branch: the report's batches of an
// experiment (report.json, oldest first by creation) put in the order of a
// branch's first-parent history, one point per commit, read from the
// repository the batches came from (their repo_url: serve's mirror, or the
// work tree `trainq submit` ran in).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"
#include "queue/store.h"

namespace trainq {

// How many commits of a branch the history walks back at most.
inline constexpr size_t kBranchHistoryCommits = 5000;

// Rewrites each of report.json's "experiments" in place: "batches" become the
// newest batch of each commit on `branch` ("" = the repository's default
// branch), in first-parent order, oldest first; batches of commits off the
// branch are left out and counted. Adds "history": {"order": "branch",
// "branch", "branches", "on_branch", "off_branch", "walked", "truncated"},
// or {"order": "created", "note"} when the repository cannot be read here
// (the batches keep their creation order). kNotFound when `branch` was named
// and no experiment's repository has it.
Status FollowBranch(Store& store, nlohmann::json& report, const std::string& branch,
                    size_t max_commits = kBranchHistoryCommits);

}  // namespace trainq
