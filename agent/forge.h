// Forges (GitHub, GitLab, Gitea): what their webhooks look like and how their
// commit status APIs are called. Pure functions over headers, bodies and
// configuration; the HTTP itself goes through HttpClient.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

enum class ForgeKind { kGithub, kGitlab, kGitea, kNone };

std::string_view ForgeName(ForgeKind kind);  // "github", "gitlab", "gitea", "none"
std::optional<ForgeKind> ParseForgeKind(std::string_view name);

inline constexpr std::string_view kZeroSha = "0000000000000000000000000000000000000000";
bool IsZeroSha(std::string_view sha);

// HMAC-SHA256 of `data` under `key`, as lowercase hex (OpenSSL).
std::string HmacSha256Hex(std::string_view key, std::string_view data);
std::string Sha256Hex(std::string_view data);
// Compares in time independent of where the strings differ, and of their
// lengths (both are hashed first).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The event name the forge put in its header: GitHub `X-GitHub-Event`,
// GitLab `X-Gitlab-Event`, Gitea `X-Gitea-Event`; "" when absent.
std::string WebhookEvent(ForgeKind forge, const HttpHeaders& headers);
bool IsPushEvent(ForgeKind forge, std::string_view event);  // includes tag pushes
bool IsPingEvent(ForgeKind forge, std::string_view event);

// GitHub `X-GitHub-Delivery`, Gitea `X-Gitea-Delivery`, GitLab
// `Idempotency-Key`, else `X-Gitlab-Event-UUID`. Without any: "sha256:" and the
// body's hash, so a redelivery of the same body is still recognised.
std::string WebhookDeliveryId(ForgeKind forge, const HttpHeaders& headers, std::string_view body);

// Whether the request carries proof of `secret`: GitHub `X-Hub-Signature-256:
// sha256=HEX`, Gitea `X-Gitea-Signature: HEX` (both HMAC-SHA256 of the raw
// body), GitLab `X-Gitlab-Token: SECRET`. An empty secret never verifies.
bool VerifyWebhook(ForgeKind forge, const HttpHeaders& headers, std::string_view body,
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

// The request that sets the status `context` of `sha`. Descriptions are cut
// to the forges' limit (140 characters on GitHub).
HttpRequest CommitStatusRequest(const StatusTarget& target, const std::string& sha,
                                CommitState state, const std::string& context,
                                const std::string& description);

}  // namespace trainq
