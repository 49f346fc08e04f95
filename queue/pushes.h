// Pushes: commit triggers (a part of Store, queue/store.h, over its one SQLite
// connection; `store.pushes()`). Webhooks and polls record pushes here, with
// their deliveries and ref heads; a background worker turns them into batches
// and reports commit statuses and pull request comments back to the forge.
// Tables from schema version 3.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"
#include "queue/types.h"

namespace trainq {

struct StoreParts;

class Pushes {
 public:
  // Webhook deliveries. Returns false when (forge, delivery_id) was seen before.
  Result<bool> RecordDelivery(const DeliveryRow& d, TimeMs now);

  struct Push {
    std::int64_t id = 0;
    std::string source;               // github | gitlab | gitea | poll
    std::string delivery_id;          // unique per source
    std::string repo_url;             // the repository as configured (not the mirror)
    std::string ref;                  // refs/heads/main
    std::string before_sha;           // all zeros: a new branch
    std::string after_sha;            // all zeros: a deleted branch
    std::string default_branch;       // as the payload named it; "" unknown
    std::int64_t pr_number = 0;       // > 0: a pull/merge request's head (ref refs/pull/N/head)
    std::string target_branch;        // a pull request's target branch
    std::string state = "pending";    // pending | done | skipped | failed
    int attempts = 0;                 // failed processing attempts so far
    TimeMs not_before_ms = 0;         // next attempt not before
    std::string result;               // what was queued, or why nothing
    std::string error;                // the last error (fetch, trainq.yaml)
    TimeMs received_ms = 0;
    TimeMs updated_ms = 0;
  };
  // Writes the delivery (deliveries table) and its push in one transaction and
  // moves the ref head of (repo_url, ref) to after_sha. nullopt: (source,
  // delivery_id) was recorded before, and nothing was written.
  Result<std::optional<std::int64_t>> RecordPush(const Push& push, TimeMs now);
  // RecordPush, only while the recorded head of (repo_url, ref) is still
  // push.before_sha (none when before_sha is all zeros): a catch-up never
  // records a move that a webhook recorded meanwhile. nullopt when it was not
  // recorded (seen before, or the head moved).
  Result<std::optional<std::int64_t>> RecordPushIfHead(const Push& push, TimeMs now);
  // Whether (source, delivery_id) was recorded (a redelivery).
  Result<bool> HasDelivery(const std::string& source, const std::string& delivery_id);
  // A catch-up or poll push that moved (repo_url, ref) to `after_sha`, which
  // is still its recorded head: the id of the newest such push, else nullopt.
  // A webhook for that move, arriving late, is then a duplicate.
  Result<std::optional<std::int64_t>> RecordedMove(const std::string& repo_url,
                                                   const std::string& ref,
                                                   const std::string& after_sha);
  // Pending pushes whose not_before_ms has passed, oldest first.
  Result<std::vector<Push>> DuePushes(TimeMs now, int limit);
  // The earliest not_before_ms among pending pushes.
  Result<std::optional<TimeMs>> NextPushDue();
  Status FinishPush(std::int64_t id, const std::string& state, const std::string& result,
                    const std::string& error, TimeMs now);
  // A failed attempt: attempts + 1, error kept, tried again at not_before.
  Status RetryPush(std::int64_t id, const std::string& error, TimeMs not_before, TimeMs now);
  Result<std::optional<Push>> GetPush(std::int64_t id);
  Result<std::vector<Push>> RecentPushes(int limit);  // newest first
  Result<std::vector<std::pair<std::string, std::int64_t>>> CountPushesByState();
  // Pushes whose after_sha starts with `sha_prefix` (hex), newest first.
  Result<std::vector<Push>> PushesForCommit(const std::string& sha_prefix);
  // The last head recorded for (repo_url, ref) by a webhook or a poll.
  Result<std::vector<std::pair<std::string, std::string>>> RefHeads(const std::string& repo_url);
  // Sets a head without a push (a poller's first look at a repository),
  // unless one is recorded already: a webhook's head recorded meanwhile stays.
  Status SetRefHead(const std::string& repo_url, const std::string& ref, const std::string& sha,
                    TimeMs now);

  struct CommitStatus {
    std::int64_t batch_id = 0;     // the batch it reports on; 0 for a push's status
    std::int64_t push_id = 0;      // a failed push's status (no batch); 0 for a batch's
    std::string repo_url;          // the repository as configured
    std::string sha;
    std::string context;           // "trainq/<experiment>"
    std::string state;             // wanted: pending | success | failure | error
    std::string description;
    std::string posted_state;      // what the forge last accepted; "" nothing yet
    std::string posted_description;  // with that description
    int attempts = 0;              // failed posts of the wanted state
    TimeMs not_before_ms = 0;
    bool gave_up = false;
    std::string last_error;
  };
  // Wants the status for a batch (kept as is when the batch has one already).
  Status AddCommitStatus(const CommitStatus& s, TimeMs now);
  // Batches whose wanted status is still pending but whose runs have all ended.
  Result<std::vector<std::int64_t>> FinishedPendingStatuses(int limit);
  // Batches' statuses wanted `pending` whose description starts with `prefix`.
  Result<std::vector<CommitStatus>> PendingCommitStatuses(const std::string& prefix);
  // Sets the wanted (final) state; attempts start over.
  Status SetCommitStatusWanted(std::int64_t batch_id, const std::string& state,
                               const std::string& description, TimeMs now);
  // Wants the status of a push that failed before queueing anything (push_id
  // set, batch_id 0); kept as is when the push has one already.
  Status AddPushStatus(const CommitStatus& s, TimeMs now);
  // Wanted differs from posted, not given up, due; oldest first; batches'
  // and failed pushes' statuses together.
  Result<std::vector<CommitStatus>> DueCommitStatuses(TimeMs now, int limit);
  // `s` names the status by its batch_id or push_id.
  Status CommitStatusPosted(const CommitStatus& s, const std::string& state,
                            const std::string& description, TimeMs now);
  Status CommitStatusFailed(const CommitStatus& s, const std::string& error, TimeMs not_before,
                            bool give_up, TimeMs now);
  Result<std::optional<CommitStatus>> GetCommitStatus(std::int64_t batch_id);
  Result<std::optional<CommitStatus>> GetPushStatus(std::int64_t push_id);
  // A push's statuses, one per context (a commit with nothing to judge has
  // one per experiment).
  Result<std::vector<CommitStatus>> GetPushStatuses(std::int64_t push_id);

  // A processed push found nothing to judge at `sha` (its change touched no
  // experiment): decided, and `trainq gate` passes it. Kept as first recorded.
  struct QuietCommit {
    std::string repo_url;
    std::string sha;
    std::int64_t push_id = 0;
    std::string note;  // "no watched path or experiment changed"
  };
  Status AddQuietCommit(const QuietCommit& q, TimeMs now);
  // Quiet commits whose sha starts with `sha_prefix` (hex, >= 4 digits).
  Result<std::vector<QuietCommit>> QuietCommits(const std::string& sha_prefix);

  // Pull request comments (schema 5): one per (repository, pull request).
  struct PrComment {
    std::string repo_url;       // the repository as configured
    std::int64_t pr_number = 0;
    std::string head_sha;       // the head the body was rendered for
    std::string comment_id;     // the forge's id; "" until created
    std::string body;           // wanted
    std::string body_sha256;    // of body
    std::string posted_sha256;  // of the body the forge last accepted
    bool settled = false;       // everything the body shows has ended
    int attempts = 0;           // failed posts of the wanted body
    TimeMs not_before_ms = 0;
    bool gave_up = false;
    std::string last_error;
    TimeMs posted_ms = 0;
  };
  // The newest processed (done) push of each pull request whose comment is
  // missing, rendered for another head, or not settled; oldest first.
  Result<std::vector<Push>> PullRequestsToRender(int limit);
  Result<std::optional<PrComment>> GetPrComment(const std::string& repo_url,
                                                std::int64_t pr_number);
  // Sets the wanted body (creating the row). A body that differs from the
  // wanted one starts its attempts over.
  Status SetPrCommentWanted(const std::string& repo_url, std::int64_t pr_number,
                            const std::string& head_sha, const std::string& body,
                            const std::string& body_sha256, bool settled, TimeMs now);
  // Wanted body not empty and not posted, not given up, due; oldest first.
  Result<std::vector<PrComment>> DuePrComments(TimeMs now, int limit);
  Status PrCommentPosted(const std::string& repo_url, std::int64_t pr_number,
                         const std::string& comment_id, const std::string& body_sha256,
                         TimeMs now);
  Status PrCommentFailed(const std::string& repo_url, std::int64_t pr_number,
                         const std::string& error, TimeMs not_before, bool give_up, TimeMs now);
  // The forge lost the comment (deleted by hand): the next post creates one.
  Status ForgetPrCommentId(const std::string& repo_url, std::int64_t pr_number, TimeMs now);

 private:
  friend struct StoreParts;
  explicit Pushes(StoreParts& parts);
  Pushes(const Pushes&) = delete;
  Pushes& operator=(const Pushes&) = delete;


  Result<std::optional<std::int64_t>> RecordPushWhere(const Push& push, TimeMs now, bool if_head);

  StoreParts& parts_;  // the Store's connection, options and the other concerns
  sql::Db& db_;        // parts_.db
};

}  // namespace trainq
