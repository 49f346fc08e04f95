#include "agent/triggers/poller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/triggers/forge.h"
#include "agent/triggers/webhook.h"
#include "core/strings.h"
#include "queue/pushes.h"

namespace trainq {

bool CatchesUp(const RepoConfig& repo) {
  return repo.poll_interval_s <= 0 && repo.catch_up_s > 0 && repo.forge != ForgeKind::kNone;
}

TimeMs CatchUpSettleMs(const RepoConfig& repo) {
  return std::min<TimeMs>(30'000, repo.catch_up_s * 100);
}

Poller::Poller(Store& store, const ServerConfig& config, MirrorCache& mirrors, const Clock& clock)
    : store_(store), config_(config), mirrors_(mirrors), clock_(clock) {}

TimeMs Poller::Interval(const RepoConfig& repo) const {
  if (repo.poll_interval_s > 0) return repo.poll_interval_s * 1000;
  return CatchesUp(repo) ? repo.catch_up_s * 1000 : 0;
}

std::optional<TimeMs> Poller::NextDue() const {
  std::optional<TimeMs> next;
  for (const auto& r : config_.repositories) {
    if (Interval(r) <= 0) continue;
    auto it = next_due_.find(r.url);
    TimeMs due = it == next_due_.end() ? 0 : it->second;
    if (!next || due < *next) next = due;
  }
  return next;
}

Result<int> Poller::Step() {
  int recorded = 0;
  for (const auto& r : config_.repositories) {
    const TimeMs interval = Interval(r);
    if (interval <= 0) continue;
    TimeMs now = clock_.Now();
    auto it = next_due_.find(r.url);
    if (it != next_due_.end() && now < it->second) continue;
    next_due_[r.url] = now + interval;
    const bool polled = r.poll_interval_s > 0;
    auto n = polled ? PollRepository(r) : CatchUpRepository(r);
    // A move seen once is looked at again when it has settled.
    for (const auto& [ref, s] : sightings_[r.url]) {
      next_due_[r.url] = std::min(next_due_[r.url], s.at + CatchUpSettleMs(r));
    }
    if (!n) {
      if (!n.error().retryable()) return std::unexpected(n.error());
      if (last_error_[r.url] != n.error().message) {
        spdlog::warn("{} {}: {} (trying again in {}s)", polled ? "polling" : "catching up", r.url,
                     n.error().message, interval / 1000);
        last_error_[r.url] = n.error().message;
      }
      continue;
    }
    if (!last_error_[r.url].empty()) {
      spdlog::info("{} {}: works again", polled ? "polling" : "catching up", r.url);
    }
    last_error_[r.url].clear();
    recorded += *n;
  }
  return recorded;
}

Result<int> Poller::CatchUpRepository(const RepoConfig& repo) {
  ASSIGN_OR_RETURN(Mirror * mirror, mirrors_.Get(repo.url));
  TRY(mirror->Fetch({repo.username, repo.token.value, repo.ssh_key}));
  ASSIGN_OR_RETURN(auto refs, mirror->Refs());
  ASSIGN_OR_RETURN(auto heads_list, store_.pushes().RefHeads(repo.url));
  std::map<std::string, std::string> heads(heads_list.begin(), heads_list.end());
  const TimeMs now = clock_.Now();
  const bool first = looked_.insert(repo.url).second;
  const std::string default_branch =
      !repo.default_branch.empty() ? repo.default_branch : mirror->DefaultBranch();
  auto& sightings = sightings_[repo.url];
  std::map<std::string, Sighting> still;
  int recorded = 0, fresh = 0, moved = 0, watched = 0;
  for (const auto& [ref, sha] : refs) {
    auto known = heads.find(ref);
    std::string before = known == heads.end() ? std::string(kZeroSha) : known->second;
    PushEvent e{ref, before, sha, {}, {}, "", default_branch};
    if (!SkipReason(repo, e).empty()) continue;  // runs nothing: not watched
    ++watched;
    if (known == heads.end() && first) {
      // First look in this process: a head never recorded is remembered,
      // not queued (an old branch must not start runs).
      TRY(store_.pushes().SetRefHead(repo.url, ref, sha, now));
      ++fresh;
      continue;
    }
    if (before == sha) continue;
    if (known != heads.end()) {
      // The fetch is behind what a webhook recorded (the recorded head is
      // not fetched yet, or descends from the one fetched): nothing missed.
      if (!mirror->HasCommit(before)) continue;
      ASSIGN_OR_RETURN(bool behind, mirror->IsAncestor(sha, before));
      if (behind) continue;
    }
    auto seen = sightings.find(ref);
    std::string recorded_head = known == heads.end() ? "" : before;
    if (seen == sightings.end() || seen->second.recorded != recorded_head) {
      still[ref] = {recorded_head, sha, now};
      ++moved;
      spdlog::info("catching up {}: {} is at {}, its last recorded head {}; looking again in {}",
                   repo.url, ref, ShortSha(sha), ShortSha(before),
                   FormatDuration(CatchUpSettleMs(repo)));
      continue;
    }
    if (now - seen->second.at < CatchUpSettleMs(repo)) {
      still[ref] = seen->second;
      continue;
    }
    Pushes::Push p;
    p.source = "catch-up";
    p.delivery_id = "catch-up:" + ref + ":" + before + ".." + sha;
    p.repo_url = repo.url;
    p.ref = ref;
    p.before_sha = before;
    p.after_sha = sha;
    p.default_branch = default_branch;
    ASSIGN_OR_RETURN(auto id, store_.pushes().RecordPushIfHead(p, now));
    if (id) {
      ++recorded;
      spdlog::warn("catching up {}: {} moved {}..{} and no webhook brought it (serve was down, "
                   "or the delivery was refused or lost): recorded as push {}",
                   repo.url, ref, ShortSha(before), ShortSha(sha), *id);
    }
  }
  sightings = std::move(still);
  if (first) {
    spdlog::info("catching up {}: first look at {} watched head(s): {} new, {} moved with no "
                 "webhook recorded",
                 repo.url, watched, fresh, moved);
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
