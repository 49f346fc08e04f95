// server.yaml's `notify:` (issue 43): where trainq tells people about what
// needs one, and about which events.
//
//   notify:
//     - name: ml-alerts
//       slack: {webhook_url: {file: /etc/trainq/slack-webhook}}   # Slack incoming webhook
//       on: [worse, drift, not_reproducible, dead_runs, pool_failing, budget]
//       repositories: [acme/model]   # optional filters: repositories, branches, experiments
//       branches: [main]             # globs, as `repositories[].branches`
//       experiments: ["lstm*"]
//       rate_limit: 20               # messages a minute to this target (default 20)
//     - name: ops
//       webhook: {url: https://ops.example.com/hooks/trainq, secret: {file: /etc/trainq/hook-secret}}
//       on: [pool_failing, budget, queue_stuck]
//
// A Slack webhook URL is a secret (whoever has it can post), so it is read
// like one ({file:} or {env:}); a generic webhook's URL is not, its signing
// key is. docs/notifications.md documents the events and the body.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/yaml_reader.h"

namespace trainq {

// The events a target can ask for, in the order docs/notifications.md lists them.
inline constexpr std::string_view kNotifyEvents[] = {
    "worse", "drift", "not_reproducible", "dead_runs", "pool_failing", "budget", "queue_stuck"};

struct NotifyTarget {
  enum class Kind { kSlack, kWebhook };
  std::string name;
  Kind kind = Kind::kWebhook;
  SecretValue slack_url;  // slack: the incoming webhook's URL
  std::string url;        // webhook: where the JSON goes
  SecretValue secret;     // webhook: the HMAC-SHA256 key ("" = unsigned; refused by the parser)
  std::vector<std::string> on;
  std::vector<std::string> repositories;  // owner/name or url; empty: all
  std::vector<std::string> branches;      // globs; empty: all (and batches of no branch)
  std::vector<std::string> experiments;   // globs; empty: all
  int rate_limit = 20;                    // messages a minute
  int line = 0;

  // The outbox's target of this one ("notify:<name>").
  std::string outbox_target() const { return "notify:" + name; }
  const std::string& send_url() const { return kind == Kind::kSlack ? slack_url.value : url; }
  bool Wants(std::string_view event) const;
  // Whether an event about this repository / branch / experiment passes the
  // filters; empty values (an event about a pool) pass the filters that
  // concern them only when those filters are not set.
  bool Matches(std::string_view project, std::string_view repo_url, std::string_view branch,
               std::string_view experiment) const;
};

// Reads the `notify:` list at `n` (`path` is "notify").
Result<std::vector<NotifyTarget>> ParseNotifyTargets(const YamlReader& r, const YAML::Node& n,
                                                     const std::string& path);

}  // namespace trainq
