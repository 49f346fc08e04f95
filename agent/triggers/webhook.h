// Receiving a forge's webhook: authenticate, validate, deduplicate, record.
//
// In this order, and nothing is stored unless all pass:
//   body over 25 MB                      -> 413 (before anything is parsed)
//   no configured secret verifies it     -> 401 (signature or token missing or wrong)
//   body not JSON                        -> 400
//   ping (GitHub)                        -> 200 "pong"
//   another event (issues, ...)          -> 202 with the reason it is ignored
//   push for a repository not configured -> 202 with the reason
//   (then for a delivery that will run:)
//   delivery id seen before              -> 200 "duplicate", nothing written
//   a move a catch-up or poll recorded already (the ref's head is that
//   commit, recorded by it)              -> 200 "duplicate", nothing written
//   over the repository's webhook_rate_limit (deliveries a minute) in its
//   budget: the default branch's pushes, fork pull requests, other refs
//                                        -> 429 with Retry-After, nothing written
//   (for a delivery that runs nothing, when skipped ones come faster than
//   webhook_rate_limit a minute: 200 "ignored", not recorded; they never
//   spend the budgets above)
//   push                                 -> recorded durably (one transaction),
//                                           202 "accepted"; fetching and diffing
//                                           happen later on the server's worker
//   push that runs nothing (deleted branch, tag, unwatched branch)
//                                        -> recorded as skipped, 200 "ignored"
//   pull/merge request opened, reopened or with new commits
//                                        -> recorded as a push of its head ref
//                                           (refs/pull/N/head, GitLab
//                                           refs/merge-requests/N/head), 202;
//                                           from a fork without
//                                           `fork_pull_requests`, with
//                                           `pull_requests: false`, or into an
//                                           unwatched branch: skipped, 200
//   other pull request actions (closed, labeled, ...) -> 202 with the reason
// The signature is checked against every repository of that forge kind, so
// the payload is never parsed before it is authenticated.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "agent/triggers/forge.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/types.h"

namespace trainq {

class Store;

inline constexpr std::size_t kMaxWebhookBodyBytes = 25 * 1024 * 1024;

// Per-repository webhook rate limits: token buckets that each hold a minute's
// worth of deliveries and refill at the configured rate. A repository has
// four, each at its webhook_rate_limit: pushes to the default branch, pull
// requests from forks, other refs, and deliveries that run nothing (skipped),
// so a flood of fork pull requests or of replays never refuses the owner's
// push to the default branch. Counted after authentication and after
// deduplication, so neither a stranger nor a redelivery uses up a budget.
// Thread-safe.
class WebhookLimiter {
 public:
  // 0: the delivery may be kept (a token is taken from the bucket `key`).
  // Otherwise the seconds until one may (the Retry-After), and nothing is taken.
  int Take(const std::string& key, int per_minute, TimeMs now);

 private:
  struct Bucket {
    double tokens = 0;
    TimeMs at = 0;
  };
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

struct WebhookReply {
  int status = 200;
  std::string body;    // JSON: {"result": ..., "reason"|"push": ...}
  std::string result;  // for metrics: accepted, ignored, duplicate, ping, unauthorized,
                       // too_large, malformed, error
  std::int64_t push_id = 0;  // when a push was recorded
  int retry_after_s = 0;     // 429: the Retry-After header
};

// `store` is used by the calling thread only (callers serialise access).
// Without a `limiter` no rate limit applies.
WebhookReply HandleWebhook(const ServerConfig& config, Store& store, ForgeKind forge,
                           const HttpHeaders& headers, std::string_view body, TimeMs now,
                           WebhookLimiter* limiter = nullptr);

// What a recorded push will do, decided from the configuration alone:
// "" when it must be processed, otherwise why nothing runs.
std::string SkipReason(const RepoConfig& repo, const PushEvent& event);

}  // namespace trainq
