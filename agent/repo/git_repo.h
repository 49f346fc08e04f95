// Reading repositories with libgit2: resolve a revision, read a file at a
// commit, walk the history (merge bases, first parents, diffs), check a
// commit out into a directory. The one reader of a repository's history and
// files: a Mirror (agent/repo/mirror.h) is a GitRepo that also fetches.
// Never shells out to git.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <optional>

#include "core/result.h"
#include "queue/types.h"

struct git_repository;

namespace trainq {

struct ChangedPath;  // agent/repo/change_detect.h

class GitRepo {
 public:
  // Opens the repository at exactly `dir` (a work tree or a bare repository).
  static Result<GitRepo> Open(const std::string& dir);
  GitRepo(GitRepo&&) noexcept;
  GitRepo& operator=(GitRepo&&) noexcept;
  ~GitRepo();

  // The canonical location: the work tree's absolute path, or the git dir when bare.
  const std::string& location() const { return location_; }

  // "HEAD", a branch, a tag, a (short) sha, "HEAD~2" ... -> the commit.
  Result<CommitInfo> Resolve(const std::string& rev);
  // The contents of `path` in the tree of commit `sha`; kNotFound when absent.
  Result<std::string> ReadFile(const std::string& sha, const std::string& path);
  // Every file (blob) of the tree of commit `sha`: its path and object id
  // (hex), in tree order.
  Result<std::vector<std::pair<std::string, std::string>>> TreeFiles(const std::string& sha);
  // Writes the tree of `sha` into `target` (created; existing files overwritten).
  // Touches neither HEAD nor the index of the repository.
  Status CheckoutTo(const std::string& sha, const std::string& target);
  // A git packfile holding commit `sha` and every tree and blob it needs (no
  // history): what a worker without access to this repository checks out from.
  Result<std::string> PackCommit(const std::string& sha);
  // Whether the object database holds commit `sha`.
  bool HasCommit(const std::string& sha);

  // History. Commit ids are full (40 hex digits).
  // A ref ("refs/heads/main") -> its commit; nullopt when there is no such ref.
  Result<std::optional<std::string>> ResolveRef(const std::string& ref);
  Result<bool> IsAncestor(const std::string& ancestor, const std::string& descendant);
  // nullopt when the histories share no commit.
  Result<std::optional<std::string>> MergeBase(const std::string& a, const std::string& b);
  Result<std::optional<std::string>> FirstParent(const std::string& sha);
  // Commits reachable from `head` but not from `base` ("" = none), oldest
  // first, at most `limit` (the newest ones are kept).
  Result<std::vector<std::string>> CommitsBetween(const std::string& base, const std::string& head,
                                                  size_t limit);
  // Tree diff base..sha with renames found; base "" diffs against the empty tree.
  Result<std::vector<ChangedPath>> Diff(const std::string& base, const std::string& sha);
  // Paths (relative to the work tree) that differ from HEAD: staged or
  // unstaged edits, deletions, and new files not ignored. Empty for a bare
  // repository.
  Result<std::vector<std::string>> UncommittedPaths();

  // Opens the bare repository at `dir`, creating it when absent.
  static Result<GitRepo> OpenOrInitBare(const std::string& dir);
  // Writes the objects of a packfile (PackCommit's output) into this
  // repository; libgit2 checks every object's hash. kCorruption when the pack
  // is malformed.
  Status AddPack(std::string_view pack);

 protected:
  GitRepo(git_repository* repo, std::string location) : repo_(repo), location_(std::move(location)) {}

  git_repository* repo_ = nullptr;
  std::string location_;
};

// The git directory of a work tree (`dir/.git`), or `dir` itself for a bare
// repository or a mirror.
std::string GitDirOf(const std::string& dir);

// A revision as a full commit id, resolved in `repo_dir` when that is a
// repository ("" = none); else the text itself when it is a commit id prefix
// (4 to 40 hex digits); else kNotFound naming what failed.
Result<std::string> ResolveRevision(const std::string& rev, const std::string& repo_dir);

}  // namespace trainq
