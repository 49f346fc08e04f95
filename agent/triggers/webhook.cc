#include "agent/triggers/webhook.h"
#include "queue/pushes.h"
#include "queue/store.h"
#include "core/strings.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>

using nlohmann::json;

namespace trainq {

namespace {

WebhookReply Reply(int status, std::string result, json body) {
  body["result"] = result;
  return {status, body.dump(), std::move(result), 0};
}

// A repository's budgets (webhook.h): a delivery that will be processed
// draws from one of three, so that a flood of one kind cannot refuse another.
std::string Budget(const RepoConfig& repo, const Pushes::Push& row, bool from_fork) {
  if (row.pr_number > 0) return from_fork ? "fork pull requests" : "other refs";
  std::string default_branch =
      !repo.default_branch.empty() ? repo.default_branch : row.default_branch;
  if (!default_branch.empty() && row.ref == "refs/heads/" + default_branch) {
    return "the default branch";
  }
  return "other refs";
}

// 429 when the budget is spent; nothing is stored.
std::optional<WebhookReply> RateLimited(WebhookLimiter* limiter, const RepoConfig& repo,
                                        const std::string& budget, TimeMs now) {
  if (!limiter || repo.webhook_rate_limit <= 0) return std::nullopt;
  int wait_s = limiter->Take(repo.url + " " + budget, repo.webhook_rate_limit, now);
  if (wait_s == 0) return std::nullopt;
  spdlog::warn("webhook for {} refused: over its webhook_rate_limit of {} a minute for {} "
               "(retry in {} s)",
               repo.url, repo.webhook_rate_limit, budget, wait_s);
  WebhookReply r =
      Reply(429, "rate_limited",
            {{"reason", "over this repository's webhook_rate_limit of " +
                            std::to_string(repo.webhook_rate_limit) + " deliveries a minute for " +
                            budget + "; deliver it again in " + std::to_string(wait_s) + " s"}});
  r.retry_after_s = wait_s;
  return r;
}

// Before a delivery is recorded: a skipped one past its own budget is
// answered without being stored (it would run nothing anyway); one seen
// before is a duplicate, and so is a move a catch-up or poll recorded
// already; only then does a delivery that will run spend its budget.
std::optional<WebhookReply> Admit(Store& store, WebhookLimiter* limiter, const RepoConfig& repo,
                                  const Pushes::Push& row, bool from_fork, TimeMs now) {
  if (row.state == "skipped") {
    if (limiter && repo.webhook_rate_limit > 0 &&
        limiter->Take(repo.url + " skipped", repo.webhook_rate_limit, now) != 0) {
      spdlog::debug("webhook for {}: skipped delivery {} not recorded (over the budget of "
                    "skipped deliveries)",
                    repo.url, row.delivery_id);
      return Reply(200, "ignored",
                   {{"reason", row.result + " (not recorded: more than " +
                                   std::to_string(repo.webhook_rate_limit) +
                                   " skipped deliveries a minute)"}});
    }
    return std::nullopt;
  }
  auto seen = store.pushes().HasDelivery(row.source, row.delivery_id);
  if (seen && *seen) {
    spdlog::info("{} delivery {} seen before: duplicate", row.source, row.delivery_id);
    return Reply(200, "duplicate", {{"reason", "delivery " + row.delivery_id + " seen before"}});
  }
  if (row.pr_number == 0) {
    auto moved = store.pushes().RecordedMove(row.repo_url, row.ref, row.after_sha);
    if (moved && *moved) {
      spdlog::info("{} delivery {}: {} at {} was recorded already by push {} (caught up)",
                   row.source, row.delivery_id, row.ref, ShortSha(row.after_sha), **moved);
      WebhookReply r = Reply(200, "duplicate",
                             {{"reason", row.ref + " at " + row.after_sha +
                                             " was recorded already as push " +
                                             std::to_string(**moved) + " (caught up)"},
                              {"push", **moved}});
      return r;
    }
  }
  return RateLimited(limiter, repo, Budget(repo, row, from_fork), now);
}

template <typename Event>
bool SameRepo(const RepoConfig& repo, const Event& e) {
  std::string want = NormaliseRepoUrl(repo.url);
  for (const auto& u : e.repo_urls) {
    if (NormaliseRepoUrl(u) == want) return true;
  }
  return !e.full_name.empty() && !repo.project.empty() &&
         Lower(e.full_name) == Lower(repo.project);
}


// GitHub and Gitea say "pull request #N", GitLab "merge request !N".
std::string PrName(ForgeKind forge, std::int64_t n) {
  return forge == ForgeKind::kGitlab ? "merge request !" + std::to_string(n)
                                     : "pull request #" + std::to_string(n);
}

WebhookReply PullRequestWebhook(const std::vector<const RepoConfig*>& candidates, Store& store,
                                ForgeKind forge, const HttpHeaders& headers,
                                std::string_view body, TimeMs now, WebhookLimiter* limiter) {
  std::string forge_name(ForgeName(forge));
  auto parsed = ParsePullRequestEvent(forge, body);
  if (!parsed) return Reply(400, "malformed", {{"reason", parsed.error().message}});
  const PullRequestEvent& pr = *parsed;
  const RepoConfig* repo = nullptr;
  for (const auto* c : candidates) {
    if (SameRepo(*c, pr)) {
      repo = c;
      break;
    }
  }
  std::string name = PrName(forge, pr.number);
  if (!repo) {
    std::string r = pr.full_name.empty() ? pr.repo_urls.front() : pr.full_name;
    return Reply(202, "ignored",
                 {{"reason", "repository " + r + " is not configured under this secret"}});
  }
  if (!pr.runs) {
    std::string why = forge == ForgeKind::kGitlab && pr.action == "update"
                          ? "update without new commits"
                          : "action '" + pr.action + "'";
    return Reply(202, "ignored",
                 {{"reason", name + ": " + why + " runs nothing (only a new or reopened " +
                                 (forge == ForgeKind::kGitlab ? "merge" : "pull") +
                                 " request or new commits do)"}});
  }
  Pushes::Push row;
  row.source = forge_name;
  row.delivery_id = WebhookDeliveryId(forge, headers, body);
  row.repo_url = repo->url;
  row.ref = pr.HeadRef(forge);
  row.before_sha = std::string(kZeroSha);
  row.after_sha = pr.head_sha;
  row.default_branch = pr.default_branch;
  row.pr_number = pr.number;
  row.target_branch = pr.target_branch;
  std::string skip;
  if (!repo->pull_requests) {
    skip = name + ": pull requests are off for " + repo->url + " (`pull_requests: false`)";
  } else if (pr.from_fork && !repo->fork_pull_requests) {
    skip = name + " comes from a fork: its code would run on your machines, so forks are "
                  "ignored unless `fork_pull_requests: true`";
  } else if (!repo->Watches("refs/heads/" + pr.target_branch)) {
    skip = name + " targets " + pr.target_branch + ", which is not in `branches` of " + repo->url;
  }
  if (!skip.empty()) {
    row.state = "skipped";
    row.result = skip;
  }
  if (auto answered = Admit(store, limiter, *repo, row, pr.from_fork, now)) return *answered;
  auto id = store.pushes().RecordPush(row, now);
  if (!id) {
    spdlog::error("{} {} of {} not recorded: {}", forge_name, name, repo->url,
                  id.error().message);
    return Reply(503, "error", {{"reason", "could not record the " + name + "; deliver it again"}});
  }
  if (!*id) {
    spdlog::info("{} delivery {} seen before: duplicate", forge_name, row.delivery_id);
    return Reply(200, "duplicate", {{"reason", "delivery " + row.delivery_id + " seen before"}});
  }
  spdlog::info("{} {} ({}, {} into {}) head {} of {} recorded as push {}{}", forge_name, name,
               pr.action, pr.head_ref, pr.target_branch, ShortSha(pr.head_sha), repo->url, **id,
               skip.empty() ? "" : " (" + skip + ")");
  WebhookReply r = skip.empty()
                       ? Reply(202, "accepted", {{"push", **id}, {"pull_request", pr.number}})
                       : Reply(200, "ignored", {{"push", **id}, {"reason", skip}});
  r.push_id = **id;
  return r;
}

}  // namespace

std::string SkipReason(const RepoConfig& repo, const PushEvent& event) {
  if (event.is_tag()) {
    if (!repo.tags) return "tag pushes are ignored (set `tags: true` to run them)";
    if (event.deleted()) return "tag deleted: nothing runs";
    return "";
  }
  if (!event.is_branch()) return "ref " + event.ref + " is neither a branch nor a tag";
  if (event.deleted()) return "branch " + event.branch() + " deleted: nothing runs";
  if (!repo.Watches(event.ref)) {
    return "branch " + event.branch() + " is not in `branches` of " + repo.url;
  }
  return "";
}

namespace {

WebhookReply AnswerWebhook(const ServerConfig& config, Store& store, ForgeKind forge,
                           const HttpHeaders& headers, std::string_view body, TimeMs now,
                           WebhookLimiter* limiter);

}  // namespace

int WebhookLimiter::Take(const std::string& key, int per_minute, TimeMs now) {
  std::lock_guard<std::mutex> lock(mu_);
  const double capacity = per_minute;
  const double per_ms = per_minute / 60'000.0;
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{capacity, now});
  Bucket& b = it->second;
  if (!fresh && now > b.at) b.tokens = std::min(capacity, b.tokens + (now - b.at) * per_ms);
  b.at = std::max(b.at, now);
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return 0;
  }
  return std::max(1, static_cast<int>(std::ceil((1 - b.tokens) / per_ms / 1000.0)));
}

WebhookReply HandleWebhook(const ServerConfig& config, Store& store, ForgeKind forge,
                           const HttpHeaders& headers, std::string_view body, TimeMs now,
                           WebhookLimiter* limiter) {
  WebhookReply r = AnswerWebhook(config, store, forge, headers, body, now, limiter);
  if (r.result == "malformed") {
    // Refused with a reason: serve's log says why, as it does for a bad
    // signature (the sender only sees the HTTP answer).
    auto j = json::parse(r.body, nullptr, false);
    std::string reason = j.is_object() ? j.value("reason", "") : "";
    spdlog::warn("{} webhook refused ({}): {}", ForgeName(forge), r.status, reason);
  }
  return r;
}

namespace {

WebhookReply AnswerWebhook(const ServerConfig& config, Store& store, ForgeKind forge,
                           const HttpHeaders& headers, std::string_view body, TimeMs now,
                           WebhookLimiter* limiter) {
  std::string forge_name(ForgeName(forge));
  if (body.size() > kMaxWebhookBodyBytes) {
    spdlog::warn("{} webhook refused: body of {} bytes is over the {} MB limit", forge_name,
                 body.size(), kMaxWebhookBodyBytes >> 20);
    return Reply(413, "too_large", {{"reason", "body over 25 MB"}});
  }
  std::vector<const RepoConfig*> candidates;
  for (const auto& r : config.repositories) {
    if (r.forge == forge && VerifyWebhook(forge, headers, body, r.secret.value)) {
      candidates.push_back(&r);
    }
  }
  if (candidates.empty()) {
    spdlog::warn("{} webhook refused: signature missing or wrong", forge_name);
    return Reply(401, "unauthorized",
                 {{"reason", "signature or token missing or wrong for every repository of this "
                             "forge"}});
  }
  std::string event = WebhookEvent(forge, headers);
  if (IsPingEvent(forge, event)) {
    if (!json::accept(body.begin(), body.end())) {
      return Reply(400, "malformed", {{"reason", "body is not valid JSON"}});
    }
    spdlog::info("{} ping received", forge_name);
    return Reply(200, "ping", {{"reason", "pong"}});
  }
  if (IsPullRequestEvent(forge, event)) {
    return PullRequestWebhook(candidates, store, forge, headers, body, now, limiter);
  }
  if (!IsPushEvent(forge, event)) {
    if (!json::accept(body.begin(), body.end())) {
      return Reply(400, "malformed", {{"reason", "body is not valid JSON"}});
    }
    return Reply(202, "ignored",
                 {{"reason", event.empty() ? "no event header: only push events are handled"
                                           : "event '" + event + "' is not handled (only push and pull requests)"}});
  }
  auto parsed = ParsePushEvent(forge, body);
  if (!parsed) return Reply(400, "malformed", {{"reason", parsed.error().message}});
  const PushEvent& push = *parsed;
  const RepoConfig* repo = nullptr;
  for (const auto* c : candidates) {
    if (SameRepo(*c, push)) {
      repo = c;
      break;
    }
  }
  if (!repo) {
    std::string name = push.full_name.empty() ? push.repo_urls.front() : push.full_name;
    return Reply(202, "ignored",
                 {{"reason", "repository " + name + " is not configured under this secret"}});
  }

  Pushes::Push row;
  row.source = forge_name;
  row.delivery_id = WebhookDeliveryId(forge, headers, body);
  row.repo_url = repo->url;
  row.ref = push.ref;
  row.before_sha = push.before;
  row.after_sha = push.after;
  row.default_branch = push.default_branch;
  std::string skip = SkipReason(*repo, push);
  if (!skip.empty()) {
    row.state = "skipped";
    row.result = skip;
  }
  if (auto answered = Admit(store, limiter, *repo, row, false, now)) return *answered;
  auto id = store.pushes().RecordPush(row, now);
  if (!id) {
    spdlog::error("{} push to {} not recorded: {}", forge_name, repo->url, id.error().message);
    return Reply(503, "error", {{"reason", "could not record the push; deliver it again"}});
  }
  if (!*id) {
    spdlog::info("{} delivery {} seen before: duplicate", forge_name, row.delivery_id);
    return Reply(200, "duplicate", {{"reason", "delivery " + row.delivery_id + " seen before"}});
  }
  spdlog::info("{} push {} {}..{} to {} recorded as push {}{}", forge_name, push.ref,
               ShortSha(push.before), ShortSha(push.after), repo->url, **id,
               skip.empty() ? "" : " (" + skip + ")");
  WebhookReply r = skip.empty() ? Reply(202, "accepted", {{"push", **id}})
                                : Reply(200, "ignored", {{"push", **id}, {"reason", skip}});
  r.push_id = **id;
  return r;
}

}  // namespace

}  // namespace trainq
