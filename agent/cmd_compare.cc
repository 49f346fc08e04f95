// `trainq compare REV_A REV_B` and `trainq gate REV --baseline BRANCH`:
// the same experiment at two commits, compared with a verdict.
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "agent/analysis.h"
#include "agent/commands.h"
#include "agent/git_repo.h"
#include "core/strings.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {

namespace {

bool IsHex(const std::string& s) {
  if (s.size() < 4 || s.size() > 40) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The batches of a revision: resolved with git when `repo_dir` is a
// repository, else read as a commit id prefix in the store.
Result<std::vector<BatchProgress>> BatchesAt(Store& store, const std::string& rev,
                                             const std::string& repo_dir) {
  std::string sha;
  std::string git_error;
  if (!repo_dir.empty()) {
    auto repo = GitRepo::Open(repo_dir);
    if (repo) {
      auto commit = repo->Resolve(rev);
      if (commit) sha = commit->sha;
      else git_error = commit.error().message;
    } else {
      git_error = repo.error().message;
    }
  }
  if (sha.empty()) {
    if (!IsHex(rev)) {
      return Fail(ErrorKind::kNotFound,
                  "cannot resolve '" + rev + "'" +
                      (git_error.empty() ? " (pass --repo DIR to resolve branch names)"
                                         : ": " + git_error));
    }
    sha = rev;
  }
  ASSIGN_OR_RETURN(auto batches, store.BatchesForCommit(sha));
  std::set<std::string> shas;
  for (const auto& b : batches) shas.insert(b.sha);
  if (shas.size() > 1) {
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + rev + "' is ambiguous: it matches " + std::to_string(shas.size()) +
                    " commits in the store; give more digits");
  }
  if (batches.empty()) {
    return Fail(ErrorKind::kNotFound,
                "no runs stored for " + rev + (rev == sha ? "" : " (" + sha.substr(0, 10) + ")") +
                    "; queue some with `trainq submit --commit " + rev + "`");
  }
  return batches;
}

}  // namespace

Status CmdCompare(const CompareCommandOptions& o, std::ostream& out) {
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  ASSIGN_OR_RETURN(auto a, BatchesAt(store, o.rev_a, o.repo));
  ASSIGN_OR_RETURN(auto b, BatchesAt(store, o.rev_b, o.repo));
  std::set<std::string> wanted(o.experiments.begin(), o.experiments.end());
  std::vector<BatchComparison> comparisons;
  std::set<std::string> seen;
  for (const auto& ba : a) {
    if (!wanted.empty() && !wanted.count(ba.experiment)) continue;
    for (const auto& bb : b) {
      if (bb.experiment == ba.experiment && bb.repo_url == ba.repo_url) {
        comparisons.push_back(CompareBatches(ba, bb));
        seen.insert(ba.experiment);
      }
    }
  }
  for (const auto& name : wanted) {
    if (!seen.count(name)) {
      return Fail(ErrorKind::kNotFound, "experiment '" + name + "' has no batch at both " +
                                            o.rev_a + " and " + o.rev_b);
    }
  }
  if (comparisons.empty()) {
    return Fail(ErrorKind::kNotFound,
                o.rev_a + " and " + o.rev_b + " have no experiment in common");
  }
  if (o.json) {
    json j = json::array();
    for (const auto& c : comparisons) j.push_back(ComparisonJson(c));
    out << j.dump(2) << "\n";
    return {};
  }
  for (const auto& c : comparisons) {
    out << c.a.experiment << " (" << c.a.metric_name << ", "
        << (c.a.metric_goal == "min" ? "lower" : "higher") << " is better)\n";
    out << "  A " << c.a.sha.substr(0, 7) << "  " << SpreadText(c.a) << "\n";
    out << "  B " << c.b.sha.substr(0, 7) << "  " << SpreadText(c.b) << "\n";
    out << "  A - B: " << ComparisonText(c) << "\n";
  }
  return {};
}

Result<int> CmdGate(const GateOptions& o, std::ostream& out) {
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  ASSIGN_OR_RETURN(auto head, BatchesAt(store, o.rev, o.repo));
  ASSIGN_OR_RETURN(auto base, BatchesAt(store, o.baseline, o.repo));
  std::set<std::string> wanted(o.experiments.begin(), o.experiments.end());
  int worse = 0, undecidable = 0, checked = 0;
  for (const auto& h : head) {
    if (!wanted.empty() && !wanted.count(h.experiment)) continue;
    const BatchProgress* match = nullptr;
    for (const auto& b : base) {
      if (b.experiment == h.experiment && b.repo_url == h.repo_url) match = &b;
    }
    ++checked;
    if (!match) {
      out << "?  " << h.experiment << ": no runs at the baseline " << o.baseline << "\n";
      ++undecidable;
      continue;
    }
    if (h.active() || match->active()) {
      out << "?  " << h.experiment << ": runs are not finished yet ("
          << (h.active() ? o.rev : o.baseline) << ")\n";
      ++undecidable;
      continue;
    }
    auto c = CompareBatches(h, *match);
    bool bad = c.verdict == stats::Verdict::kWorse;
    out << (bad ? "✗  " : "✓  ") << h.experiment << ": " << SpreadText(h) << " vs "
        << SpreadText(*match) << "; " << ComparisonText(c) << "\n";
    if (bad) ++worse;
    if (c.verdict == stats::Verdict::kNotEnoughRuns) ++undecidable;
  }
  if (checked == 0) {
    return Fail(ErrorKind::kNotFound, "no batch to check at " + o.rev);
  }
  if (worse) {
    out << worse << " experiment(s) significantly worse than " << o.baseline << "\n";
    return 1;
  }
  if (undecidable && o.strict) {
    out << "cannot decide every experiment (--strict)\n";
    return 2;
  }
  out << "no significant regression against " << o.baseline << "\n";
  return 0;
}

}  // namespace trainq
