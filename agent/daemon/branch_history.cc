#include "agent/daemon/branch_history.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "agent/repo/git_repo.h"
#include "queue/run_queue.h"

using nlohmann::json;

namespace trainq {

namespace {

// Cuts `points` (oldest first) to page `page` of `per_page`, newest page
// first, and says where in `history`.
void CutPage(const std::vector<std::int64_t>& points, size_t page, size_t per_page,
             HistoryPage& out) {
  per_page = std::max<size_t>(1, per_page);
  size_t pages = std::max<size_t>(1, (points.size() + per_page - 1) / per_page);
  page = std::min(page, pages - 1);
  size_t end = points.size() - std::min(points.size(), page * per_page);
  size_t begin = end - std::min(end, per_page);
  out.batch_ids.assign(points.begin() + static_cast<std::ptrdiff_t>(begin),
                       points.begin() + static_cast<std::ptrdiff_t>(end));
  if (begin > 0) out.before = points[begin - 1];
  out.history["points"] = points.size();
  out.history["page"] = page;
  out.history["pages"] = pages;
  out.history["per_page"] = per_page;
}

}  // namespace

Result<std::vector<HistoryPage>> HistoryPages(Store& store, const std::string& experiment,
                                              const std::string& branch, size_t page,
                                              size_t per_page, size_t max_commits) {
  ASSIGN_OR_RETURN(auto keys, store.runs().ExperimentBatchKeys(experiment));
  // Oldest first, by creation then id (the report's order), per repository.
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
    return std::tie(a.created_ms, a.id) < std::tie(b.created_ms, b.id);
  });
  std::map<std::string, std::vector<const RunQueue::BatchKey*>> by_repo;
  for (const auto& k : keys) by_repo[k.repo_url].push_back(&k);
  std::vector<HistoryPage> out;
  bool named_found = branch.empty();
  std::string missing_note;
  for (const auto& [url, batches] : by_repo) {
    HistoryPage hp;
    hp.repo_url = url;
    hp.newest = batches.back()->id;
    std::vector<std::int64_t> points;
    auto repo = GitRepo::Open(url);
    if (!repo) {
      hp.history = {{"order", "created"},
                    {"note", "in the order the batches were made: the repository " + url +
                                 " cannot be read here (" + repo.error().message + ")"}};
      for (const auto* b : batches) points.push_back(b->id);
      CutPage(points, page, per_page, hp);
      out.push_back(std::move(hp));
      continue;
    }
    std::string want = branch.empty() ? repo->DefaultBranch() : branch;
    ASSIGN_OR_RETURN(auto branches, repo->Branches());
    auto line = repo->FirstParents(want, max_commits);
    if (!line) {
      std::string note = want.empty() ? repo->location() + " has no branch"
                                      : line.error().message;
      if (!branch.empty()) missing_note = note;
      hp.history = {{"order", "created"}, {"branch", want}, {"branches", branches},
                    {"note", "in the order the batches were made: " + note}};
      for (const auto* b : batches) points.push_back(b->id);
      CutPage(points, page, per_page, hp);
      out.push_back(std::move(hp));
      continue;
    }
    named_found = true;
    // Position along the branch, oldest first.
    std::unordered_map<std::string, size_t> pos;
    for (size_t i = 0; i < line->size(); ++i) pos[(*line)[line->size() - 1 - i]] = i;
    std::map<size_t, const RunQueue::BatchKey*> by_pos;  // the newest batch of each commit
    size_t off = 0;
    for (const auto* b : batches) {
      auto it = pos.find(b->sha);
      if (it == pos.end()) {
        ++off;
        continue;
      }
      by_pos[it->second] = b;
    }
    // A batch reusing the runs of another point is shown once, at the point
    // that ran them.
    std::set<std::int64_t> on_line;
    for (const auto& [p, b] : by_pos) on_line.insert(b->id);
    for (const auto& [p, b] : by_pos) {
      if (b->reuses_batch_id && on_line.count(*b->reuses_batch_id)) {
        hp.reused_at[*b->reuses_batch_id].push_back(b->sha);
        continue;
      }
      points.push_back(b->id);
    }
    hp.history = {{"order", "branch"},
                  {"branch", want},
                  {"branches", branches},
                  {"on_branch", points.size()},
                  {"off_branch", off},
                  {"walked", line->size()},
                  {"truncated", line->size() >= max_commits}};
    CutPage(points, page, per_page, hp);
    out.push_back(std::move(hp));
  }
  if (!named_found) {
    return Fail(ErrorKind::kNotFound, missing_note.empty() ? "no branch '" + branch + "'"
                                                           : missing_note);
  }
  return out;
}

}  // namespace trainq
