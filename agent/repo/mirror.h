// Mirror: a bare copy of a watched repository under the data directory,
// fetched with libgit2 (file://, https with a token, ssh when libgit2 was
// built with it). Runs execute from the mirror: the store's repository url for
// pushed commits is the mirror's path, which GitRepo::Open reads like any
// other repository.
//
// Fetch mirrors every branch and tag (`+refs/heads/*:refs/heads/*`,
// `+refs/tags/*:refs/tags/*`, pruned), and on request a pull request's head
// ref. Objects are only ever added, so a run
// checking a commit out of the mirror is never disturbed by a fetch in
// another thread. Threading: one Mirror object per thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "core/result.h"
#include "queue/types.h"

struct git_repository;

namespace trainq {

struct FetchAuth {
  std::string username;  // https user for the token
  std::string token;     // https password; never logged
  std::string ssh_key;   // private key file for ssh; "" = ssh-agent
};

class Mirror : public GitRepo {
 public:
  // <data_dir>/mirrors/<hash of the url>/<name>.git: stable per url, and the
  // last path segment keeps the repository's name for `trainq status`.
  static std::string PathFor(const std::string& data_dir, const std::string& url);
  // Opens the mirror at `dir`, creating an empty bare repository when absent.
  static Result<Mirror> Open(const std::string& dir, const std::string& url);

  const std::string& path() const { return location(); }
  const std::string& url() const { return url_; }

  // Fetches every branch and tag, and the refs in `extra_refs` under their
  // own names (a pull request's head: refs/pull/N/head on GitHub and Gitea,
  // refs/merge-requests/N/head on GitLab; only the one asked for, since a
  // busy repository has thousands). kUnavailable (network, auth, missing
  // repository) with libgit2's message; the token never appears in it.
  Status Fetch(const FetchAuth& auth, const std::vector<std::string>& extra_refs = {});
  // refs/heads/* and refs/tags/* (tags peeled to their commit) -> sha.
  Result<std::map<std::string, std::string>> Refs();
  // The branch the remote's HEAD names (as learned at the last fetch), "" if unknown.
  std::string DefaultBranch();
  // Reading the history and files: GitRepo's (HasCommit, ResolveRef,
  // IsAncestor, MergeBase, FirstParent, CommitsBetween, Diff, ReadFile ...).

 private:
  Mirror(git_repository* repo, std::string path, std::string url)
      : GitRepo(repo, std::move(path)), url_(std::move(url)) {}
  std::string url_;
};

// The mirrors of one thread, opened on first use and kept open.
class MirrorCache {
 public:
  explicit MirrorCache(std::string data_dir) : data_dir_(std::move(data_dir)) {}
  Result<Mirror*> Get(const std::string& url);

 private:
  std::string data_dir_;
  std::map<std::string, Mirror> mirrors_;
};

// Whether this libgit2 can fetch over ssh / https.
bool GitSupportsSsh();
bool GitSupportsHttps();

}  // namespace trainq
