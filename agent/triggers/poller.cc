#include "agent/triggers/poller.h"

#include <spdlog/spdlog.h>

#include "agent/triggers/forge.h"
#include "agent/triggers/webhook.h"
#include "core/strings.h"
#include "queue/pushes.h"

namespace trainq {

Poller::Poller(Store& store, const ServerConfig& config, MirrorCache& mirrors, const Clock& clock)
    : store_(store), config_(config), mirrors_(mirrors), clock_(clock) {}

std::optional<TimeMs> Poller::NextDue() const {
  std::optional<TimeMs> next;
  for (const auto& r : config_.repositories) {
    if (r.poll_interval_s <= 0) continue;
    auto it = next_due_.find(r.url);
    TimeMs due = it == next_due_.end() ? 0 : it->second;
    if (!next || due < *next) next = due;
  }
  return next;
}

Result<int> Poller::Step() {
  int recorded = 0;
  for (const auto& r : config_.repositories) {
    if (r.poll_interval_s <= 0) continue;
    TimeMs now = clock_.Now();
    auto it = next_due_.find(r.url);
    if (it != next_due_.end() && now < it->second) continue;
    next_due_[r.url] = now + r.poll_interval_s * 1000;
    auto n = PollRepository(r);
    if (!n) {
      if (!n.error().retryable()) return std::unexpected(n.error());
      if (last_error_[r.url] != n.error().message) {
        spdlog::warn("polling {}: {} (trying again in {}s)", r.url, n.error().message,
                     r.poll_interval_s);
        last_error_[r.url] = n.error().message;
      }
      continue;
    }
    if (!last_error_[r.url].empty()) spdlog::info("polling {}: works again", r.url);
    last_error_[r.url].clear();
    recorded += *n;
  }
  return recorded;
}

Result<int> Poller::PollRepository(const RepoConfig& repo) {
  ASSIGN_OR_RETURN(Mirror * mirror, mirrors_.Get(repo.url));
  TRY(mirror->Fetch({repo.username, repo.token.value, repo.ssh_key}));
  ASSIGN_OR_RETURN(auto refs, mirror->Refs());
  ASSIGN_OR_RETURN(auto heads_list, store_.pushes().RefHeads(repo.url));
  std::map<std::string, std::string> heads(heads_list.begin(), heads_list.end());
  TimeMs now = clock_.Now();
  if (!looked_.count(repo.url)) {
    // First look in this process: refs never recorded (by a webhook or an
    // earlier poll) are remembered, not queued; a whole history of old
    // branches must not start runs. Known heads that moved are pushes.
    looked_.insert(repo.url);
    int fresh = 0;
    for (const auto& [ref, sha] : refs) {
      if (heads.count(ref)) continue;
      TRY(store_.pushes().SetRefHead(repo.url, ref, sha, now));
      heads[ref] = sha;
      ++fresh;
    }
    if (fresh) spdlog::info("polling {}: first look, {} refs recorded", repo.url, fresh);
  }
  std::string default_branch =
      !repo.default_branch.empty() ? repo.default_branch : mirror->DefaultBranch();
  int recorded = 0;
  auto record = [&](const std::string& ref, const std::string& before,
                    const std::string& after) -> Status {
    PushEvent e{ref, before, after, {}, {}, "", default_branch};
    Pushes::Push p;
    p.source = "poll";
    p.delivery_id = "poll:" + ref + ":" + before + ".." + after;
    p.repo_url = repo.url;
    p.ref = ref;
    p.before_sha = before;
    p.after_sha = after;
    p.default_branch = default_branch;
    std::string skip = SkipReason(repo, e);
    if (!skip.empty()) {
      p.state = "skipped";
      p.result = skip;
    }
    ASSIGN_OR_RETURN(auto id, store_.pushes().RecordPush(p, now));
    if (id) {
      ++recorded;
      spdlog::info("polling {}: {} moved {}..{}, recorded as push {}{}", repo.url, ref,
                   ShortSha(before), ShortSha(after), *id,
                   skip.empty() ? "" : " (" + skip + ")");
    }
    return {};
  };
  for (const auto& [ref, sha] : refs) {
    auto it = heads.find(ref);
    if (it != heads.end() && it->second == sha) continue;
    TRY(record(ref, it == heads.end() ? std::string(kZeroSha) : it->second, sha));
  }
  for (const auto& [ref, sha] : heads) {
    if (!refs.count(ref)) TRY(record(ref, sha, std::string(kZeroSha)));
  }
  return recorded;
}

}  // namespace trainq
