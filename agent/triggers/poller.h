// Polling fallback: repositories with a `poll_interval` are fetched into their
// mirror that often; a branch head that moved since the last webhook or poll
// is recorded as a push exactly like a webhook's (source "poll", delivery id
// "poll:<ref>:<old>..<new>", so the same move is never recorded twice) and
// goes through the same processing.
//
// The first poll of a repository in a process records the refs it has never
// seen without queueing anything (old branches must not start runs); heads it
// knew that moved meanwhile are pushes.
//
// Catch-up (issue 38): a repository with a forge and no `poll_interval` is
// fetched at start and every `catch_up` (5 min by default). A webhook gap is a
// watched head (a branch in `branches`, a tag with `tags: true`) that differs
// from the last head recorded for it by a webhook, a poll or a catch-up: a
// push serve did not receive (it was down or restarting, the delivery was
// refused or lost). Seen on two looks `settle` apart (a tenth of `catch_up`,
// at most 30 s: a delivery on its way is not taken for a lost one), the move
// is recorded as a push with source "catch-up" and delivery id
// "catch-up:<ref>:<old>..<new>", only while the recorded head is still the
// old one (RecordPushIfHead), and processed like any push. A webhook for the
// same move arriving later is a duplicate (webhook.h). Not caught up: a
// fetch that is behind the recorded head, a deleted branch, a branch created
// while serve was down (its first look cannot tell it from an old one), and
// pull requests (their heads are not branches).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "agent/repo/mirror.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "queue/store.h"

namespace trainq {

// Whether `repo` is caught up (see above), and how long a move must be seen.
bool CatchesUp(const RepoConfig& repo);
TimeMs CatchUpSettleMs(const RepoConfig& repo);

class Poller {
 public:
  Poller(Store& store, const ServerConfig& config, MirrorCache& mirrors, const Clock& clock);
  // Polls every repository whose interval has passed, and catches up those
  // that are due. Returns how many pushes were recorded. A repository that
  // cannot be fetched is logged and tried again at its next interval.
  Result<int> Step();
  // Polls one repository now (tests, and Step).
  Result<int> PollRepository(const RepoConfig& repo);
  // Catches one repository up now (tests, and Step): how many pushes it
  // recorded.
  Result<int> CatchUpRepository(const RepoConfig& repo);
  // When the next poll or catch-up is due; nullopt when nothing is polled.
  std::optional<TimeMs> NextDue() const;

 private:
  // A watched head seen moved by a catch-up, waiting for its second look.
  struct Sighting {
    std::string recorded;  // the head recorded for the ref ("" none)
    std::string seen;      // the mirror's head
    TimeMs at = 0;         // first seen
  };
  TimeMs Interval(const RepoConfig& repo) const;  // ms; 0: neither

  Store& store_;
  const ServerConfig& config_;
  MirrorCache& mirrors_;
  const Clock& clock_;
  std::map<std::string, TimeMs> next_due_;       // by url
  std::map<std::string, std::string> last_error_;  // by url, to log a failure once
  std::set<std::string> looked_;                   // urls polled once by this process
  std::map<std::string, std::map<std::string, Sighting>> sightings_;  // by url, then ref
};

}  // namespace trainq
