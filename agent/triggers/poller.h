// Polling fallback: repositories with a `poll_interval` are fetched into their
// mirror that often; a branch head that moved since the last webhook or poll
// is recorded as a push exactly like a webhook's (source "poll", delivery id
// "poll:<ref>:<old>..<new>", so the same move is never recorded twice) and
// goes through the same processing.
//
// The first poll of a repository in a process records the refs it has never
// seen without queueing anything (old branches must not start runs); heads it
// knew that moved meanwhile are pushes.
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

class Poller {
 public:
  Poller(Store& store, const ServerConfig& config, MirrorCache& mirrors, const Clock& clock);
  // Polls every repository whose interval has passed. Returns how many pushes
  // were recorded. A repository that cannot be fetched is logged and tried
  // again at its next interval.
  Result<int> Step();
  // Polls one repository now (tests, and Step).
  Result<int> PollRepository(const RepoConfig& repo);
  // When the next poll is due; nullopt when nothing is polled.
  std::optional<TimeMs> NextDue() const;

 private:
  Store& store_;
  const ServerConfig& config_;
  MirrorCache& mirrors_;
  const Clock& clock_;
  std::map<std::string, TimeMs> next_due_;       // by url
  std::map<std::string, std::string> last_error_;  // by url, to log a failure once
  std::set<std::string> looked_;                   // urls polled once by this process
};

}  // namespace trainq
