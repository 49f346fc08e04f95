// The server's background work: recorded pushes become batches, watched
// repositories are polled, commit statuses go back to the forge.
//
// PushProcessor, for one push: fetch the mirror when the pushed commit is not
// in it yet; choose what to compare with
//   - an ordinary push: `before`;
//   - a new branch (`before` all zeros): the merge-base with the default branch;
//   - a force push (`before` not an ancestor of `after`): the merge-base of both;
//   - a pull request (ref refs/pull/N/head): the merge-base of its head with its
//     target branch, after fetching both (the reason says "pull request #N");
// read trainq.yaml at `after` (and at the base), detect the experiments to run
// (agent/repo/change_detect.h), submit one batch per experiment for the head commit
// (or for every new commit with `per_commit: true`), and want a `pending`
// commit status for each new batch. Batches reference the mirror, so runs
// check their commit out of it.
// A fetch that fails, or a commit still missing after it, is tried again with
// backoff (2 s, 4 s, 8 s, ...) and after `fetch_attempts` recorded as the
// push's error (shown by `trainq status`). A bad trainq.yaml fails at once.
// A push that failed gets a commit status (when statuses are on for its
// repository) under the repository's context: `failure` with the error for a
// bad trainq.yaml ("trainq.yaml:12: unknown key 'repats'"), `error` for a
// fetch that kept failing.
//
// PushPipeline runs that and the Poller on one thread, and the
// StatusReporter and the PrCommentReporter on a second (a slow forge never
// delays a push); each thread has its own Store connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/triggers/forge_status.h"
#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "agent/triggers/forge_status.h"
#include "agent/triggers/poller.h"
#include "agent/triggers/pr_comments.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/pushes.h"
#include "queue/store.h"

namespace trainq {

struct PushPipelineOptions {
  std::string data_dir;              // mirrors/ lives here
  TimeMs fetch_retry_base_ms = 2'000;
  int fetch_attempts = 5;
  size_t max_commits_per_push = 100;  // per_commit: the newest ones
  TimeMs idle_wait_ms = 1'000;        // longest sleep between passes
  StatusReporterOptions status;
  PrCommentOptions comments;
};

// The commit status description for a push that failed: the error without
// the "<repository> at <sha>: " it was wrapped in, on one line, at most 140
// characters (GitHub's limit).
std::string FailedPushDescription(std::string_view message, std::string_view repo_url);

class PushProcessor {
 public:
  PushProcessor(Store& store, const ServerConfig& config, MirrorCache& mirrors, const Clock& clock,
                PushPipelineOptions options);
  // Handles the pushes that are due; returns how many.
  Result<int> ProcessDue(int limit);
  // Handles one push and records its outcome (done, failed, or a retry).
  Status Process(const Pushes::Push& push);

 private:
  // One push's commits, and what they are compared with.
  struct PushCommit {
    const RepoConfig& repo;
    const Pushes::Push& push;
    Mirror& mirror;      // read as batches name it (its location())
    std::string source;  // "github push to main"
    std::string how;     // how the base was chosen
    bool everything;     // every experiment runs (a tag)
  };
  // What was queued, as one line; an Error when nothing could be decided.
  // The steps: fetch what is missing, choose the base, then per commit
  // QueueCommit (detect, check) -> QueueTriggered (reuse or submit,
  // baseline, pending status) or RecordQuietCommit.
  Result<std::string> Run(const RepoConfig& repo, const Pushes::Push& push);
  Result<std::string> QueueCommit(const PushCommit& c, const std::string& sha,
                                  const std::string& commit_base);
  Status RecordQuietCommit(const PushCommit& c, const std::string& sha, const Manifest& after);
  Result<std::string> QueueTriggered(const PushCommit& c, const std::string& sha,
                                     const std::string& commit_base, const Manifest& after,
                                     const std::vector<ExperimentTrigger>& triggers);

  Store& store_;
  const ServerConfig& config_;
  MirrorCache& mirrors_;
  const Clock& clock_;
  PushPipelineOptions options_;
};

class PushPipeline {
 public:
  PushPipeline(std::string db_path, const ServerConfig& config, HttpClient& http,
               const Clock& clock, PushPipelineOptions options);
  ~PushPipeline();
  PushPipeline(const PushPipeline&) = delete;
  PushPipeline& operator=(const PushPipeline&) = delete;

  // Opens the threads' stores and starts them.
  Status Start();
  // A push was recorded: process it now rather than at the next pass.
  void Wake();
  void Stop();

 private:
  void PushLoop(Store store);
  void StatusLoop(Store store);
  // Waits up to `ms` or until woken or stopped.
  void Wait(TimeMs ms, bool& woken);

  std::string db_path_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  PushPipelineOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool push_woken_ = false;
  bool status_woken_ = false;
  std::thread push_thread_;
  std::thread status_thread_;
};

}  // namespace trainq
