// Forges (GitHub, GitLab, Gitea): what their webhooks look like and how their
// commit status APIs are called. Pure functions over headers, bodies and
// configuration; the HTTP itself goes through HttpClient.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto.h"  // HmacSha256Hex, Sha256Hex, ConstantTimeEquals
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

enum class ForgeKind { kGithub, kGitlab, kGitea, kNone };

std::string_view ForgeName(ForgeKind kind);  // "github", "gitlab", "gitea", "none"
std::optional<ForgeKind> ParseForgeKind(std::string_view name);

inline constexpr std::string_view kZeroSha = "0000000000000000000000000000000000000000";
bool IsZeroSha(std::string_view sha);

// The event name the forge put in its header: GitHub `X-GitHub-Event`,
// GitLab `X-Gitlab-Event`, Gitea `X-Gitea-Event`; "" when absent.
std::string WebhookEvent(ForgeKind forge, const HttpHeaders& headers);
bool IsPushEvent(ForgeKind forge, std::string_view event);  // includes tag pushes
bool IsPingEvent(ForgeKind forge, std::string_view event);
// GitHub and Gitea `pull_request` (Gitea also `pull_request_sync`), GitLab
// `Merge Request Hook`.
bool IsPullRequestEvent(ForgeKind forge, std::string_view event);

// GitHub `X-GitHub-Delivery`, Gitea `X-Gitea-Delivery`, GitLab
// `Idempotency-Key`, else `X-Gitlab-Event-UUID`. Without any: "sha256:" and the
// body's hash, so a redelivery of the same body is still recognised.
std::string WebhookDeliveryId(ForgeKind forge, const HttpHeaders& headers, std::string_view body);

// Whether the request carries proof of `secret`: GitHub `X-Hub-Signature-256:
// sha256=HEX`, Gitea `X-Gitea-Signature: HEX` (both HMAC-SHA256 of the raw
// body), GitLab `X-Gitlab-Token: SECRET`. An empty secret never verifies.
bool VerifyWebhook(ForgeKind forge, const HttpHeaders& headers, std::string_view body,
                   std::string_view secret);

// What the headers alone say about VerifyWebhook, before a body is read:
// kRefused, it cannot verify (no or a malformed signature header, a GitLab
// token that differs, an empty secret); kVerified, it has (GitLab's token is
// a header); kNeedsBody, a well-formed HMAC to check against the body
// (GitHub, Gitea).
enum class WebhookPrecheck { kRefused, kNeedsBody, kVerified };
WebhookPrecheck PrecheckWebhook(ForgeKind forge, const HttpHeaders& headers,
                                std::string_view secret);

struct PushEvent {
  std::string ref;     // refs/heads/main, refs/tags/v1
  std::string before;  // all zeros for a new branch or tag
  std::string after;   // all zeros for a deleted one
  std::vector<std::string> commits;    // ids listed in the payload, oldest first
  std::vector<std::string> repo_urls;  // every URL the payload gives for the repository
  std::string full_name;               // owner/name, or GitLab's path_with_namespace
  std::string default_branch;          // "" when the payload does not say

  bool created() const { return IsZeroSha(before); }
  bool deleted() const { return IsZeroSha(after); }
  bool is_tag() const { return ref.starts_with("refs/tags/"); }
  bool is_branch() const { return ref.starts_with("refs/heads/"); }
  std::string branch() const;  // "main" for refs/heads/main, else ""
};

// Parses a push payload in the forge's shape. kInvalidArgument names what is
// missing or malformed.
Result<PushEvent> ParsePushEvent(ForgeKind forge, std::string_view body);

// A pull request (GitLab: merge request) event.
struct PullRequestEvent {
  std::int64_t number = 0;     // GitHub/Gitea `number`, GitLab `iid`
  std::string action;          // as the forge names it: opened, synchronize, update, ...
  bool runs = false;           // the action brings a head to run (see ParsePullRequestEvent)
  std::string head_sha;
  std::string head_ref;        // the source branch ("feature")
  std::string target_branch;   // the base branch ("main")
  bool from_fork = false;      // the head lives in another repository than the base
  std::vector<std::string> repo_urls;  // every URL the payload gives for the base repository
  std::string full_name;               // the base repository: owner/name or path_with_namespace
  std::string default_branch;          // of the base repository; "" when not said
  std::string title;

  // The ref the forge keeps the head under in the base repository:
  // refs/pull/N/head (GitHub, Gitea), refs/merge-requests/N/head (GitLab).
  std::string HeadRef(ForgeKind forge) const;
};

// Parses a pull request payload in the forge's shape. `runs` is true for
// GitHub opened/synchronize/reopened, Gitea opened/synchronized/reopened and
// GitLab open/reopen, and update only when it carries `oldrev` (new commits;
// an update without is a title, label or description change). kInvalidArgument
// names what is missing or malformed.
Result<PullRequestEvent> ParsePullRequestEvent(ForgeKind forge, std::string_view body);

// "https://GitHub.com/Org/Repo.git/" and "git@github.com:Org/Repo" compare
// equal: scheme, user, ".git" and trailing slashes dropped, host lowercased,
// scp-like ssh syntax turned into host/path.
std::string NormaliseRepoUrl(std::string_view url);

// Commit statuses ------------------------------------------------------------

enum class CommitState { kPending, kSuccess, kFailure, kError };
std::string_view CommitStateName(CommitState s);  // pending, success, failure, error
std::optional<CommitState> ParseCommitState(std::string_view s);

struct StatusTarget {
  ForgeKind forge = ForgeKind::kNone;
  std::string api_url;  // https://api.github.com, https://gitlab.com/api/v4, https://gitea.example/api/v1
  std::string project;  // owner/name (GitLab: the full path with namespace)
  std::string token;
};

// The default API base URL of a forge, derived from the repository URL's host
// for self-hosted GitLab and Gitea ("" when it cannot be told).
std::string DefaultApiUrl(ForgeKind forge, std::string_view repo_url);
// "owner/name" from a repository URL ("" when it cannot be told).
std::string ProjectFromUrl(std::string_view repo_url);

// A post to a forge (a commit status, a pull request comment) that failed
// for the `attempt`-th time: the next try waits `base_ms`, doubled for each
// earlier failure (up to about an hour); the try that reaches
// `max_attempts` gives up.
struct ForgeRetry {
  int attempt = 0;
  bool give_up = false;
  std::int64_t delay_ms = 0;
};
ForgeRetry NextForgeRetry(int failed_before, std::int64_t base_ms, int max_attempts);
// A forge's error answer as one line: "HTTP 422 from WHERE: <body, 200 bytes>".
std::string ForgeHttpError(const HttpResponse& response, const std::string& where);

// GitHub refuses a commit status description longer than 140 characters.
inline constexpr std::size_t kMaxStatusDescription = 140;
// `text` cut to kMaxStatusDescription bytes: when longer, its first 137 (never
// inside a UTF-8 character) and "...".
std::string FitStatusDescription(std::string text);

// The request that sets the status `context` of `sha`. Descriptions are cut
// to the forges' limit (FitStatusDescription). `target_url` (the forges'
// "Details" link; all three call it target_url) is sent when not "".
HttpRequest CommitStatusRequest(const StatusTarget& target, const std::string& sha,
                                CommitState state, const std::string& context,
                                const std::string& description,
                                const std::string& target_url = "");

// Pull request comments --------------------------------------------------------
// One comment per pull request, created once and then edited in place:
//   GitHub  POST  /repos/{owner}/{repo}/issues/{n}/comments        {"body": ...}
//           PATCH /repos/{owner}/{repo}/issues/comments/{id}       {"body": ...}
//   GitLab  POST  /projects/{url-encoded path}/merge_requests/{iid}/notes      {"body": ...}
//           PUT   /projects/{url-encoded path}/merge_requests/{iid}/notes/{id} {"body": ...}
//   Gitea   POST  /repos/{owner}/{repo}/issues/{n}/comments        {"body": ...}
//           PATCH /repos/{owner}/{repo}/issues/comments/{id}       {"body": ...}
// with the same authentication and headers as CommitStatusRequest, plus
// User-Agent and Accept.
inline constexpr std::string_view kForgeUserAgent = "trainq/0.1";
HttpRequest CreateCommentRequest(const StatusTarget& target, std::int64_t pr_number,
                                 const std::string& body);
HttpRequest EditCommentRequest(const StatusTarget& target, std::int64_t pr_number,
                               const std::string& comment_id, const std::string& body);
// The comment id from the forge's answer to CreateCommentRequest (`id` of the
// created comment or note); kInvalidArgument when it has none.
Result<std::string> ParseCreatedCommentId(std::string_view response_body);

}  // namespace trainq
