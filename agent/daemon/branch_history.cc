#include "agent/daemon/branch_history.h"

#include <map>
#include <unordered_map>
#include <vector>

#include "agent/repo/git_repo.h"
#include "queue/run_queue.h"

using nlohmann::json;

namespace trainq {

Status FollowBranch(Store& store, json& report, const std::string& branch, size_t max_commits) {
  if (!report.contains("experiments") || !report["experiments"].is_array()) return {};
  // Where each batch came from: the repository's location, by batch id.
  std::unordered_map<std::int64_t, std::string> urls;
  std::map<std::string, bool> looked;
  for (const auto& e : report["experiments"]) {
    std::string name = e.value("experiment", "");
    if (looked[name]) continue;
    looked[name] = true;
    ASSIGN_OR_RETURN(auto batches, store.runs().BatchesOfExperiment(name));
    for (const auto& b : batches) urls[b.id] = b.repo_url;
  }
  bool named_found = branch.empty();
  std::string missing_note;
  for (auto& e : report["experiments"]) {
    json& batches = e["batches"];
    // The newest batch's repository: a repository moved or re-mirrored keeps
    // its newest location.
    std::string url;
    for (const auto& b : batches) {
      auto it = urls.find(b.value("id", std::int64_t{0}));
      if (it != urls.end() && !it->second.empty()) url = it->second;
    }
    auto repo = GitRepo::Open(url);
    if (!repo) {
      e["history"] = {{"order", "created"},
                      {"note", "in the order the batches were made: the repository " + url +
                                   " cannot be read here (" + repo.error().message + ")"}};
      continue;
    }
    std::string want = branch.empty() ? repo->DefaultBranch() : branch;
    ASSIGN_OR_RETURN(auto branches, repo->Branches());
    auto line = repo->FirstParents(want, max_commits);
    if (!line) {
      std::string note = want.empty() ? repo->location() + " has no branch"
                                      : line.error().message;
      if (!branch.empty()) missing_note = note;
      e["history"] = {{"order", "created"}, {"branch", want}, {"branches", branches},
                      {"note", "in the order the batches were made: " + note}};
      continue;
    }
    named_found = true;
    // Position along the branch, oldest first.
    std::unordered_map<std::string, size_t> pos;
    for (size_t i = 0; i < line->size(); ++i) pos[(*line)[line->size() - 1 - i]] = i;
    std::map<size_t, json> by_pos;  // the newest batch of each commit (batches are oldest first)
    size_t off = 0;
    for (auto& b : batches) {
      auto it = pos.find(b.value("commit", ""));
      if (it == pos.end()) {
        ++off;
        continue;
      }
      by_pos[it->second] = std::move(b);
    }
    json ordered = json::array();
    for (auto& [p, b] : by_pos) ordered.push_back(std::move(b));
    e["history"] = {{"order", "branch"},
                    {"branch", want},
                    {"branches", branches},
                    {"on_branch", ordered.size()},
                    {"off_branch", off},
                    {"walked", line->size()},
                    {"truncated", line->size() >= max_commits}};
    batches = std::move(ordered);
  }
  if (!named_found) {
    return Fail(ErrorKind::kNotFound, missing_note.empty() ? "no branch '" + branch + "'"
                                                           : missing_note);
  }
  return {};
}

}  // namespace trainq
