#include "agent/results/retry.h"

#include <vector>

#include "core/strings.h"
#include "queue/run_queue.h"

using nlohmann::json;

namespace trainq {

Result<json> RetryRuns(Store& store, std::int64_t id, bool batch, TimeMs now,
                       const std::string& who) {
  std::vector<std::int64_t> ids;
  if (batch) {
    ASSIGN_OR_RETURN(auto b, store.runs().Batch(id));
    if (!b) return Fail(ErrorKind::kNotFound, "batch " + std::to_string(id) + " does not exist");
    ASSIGN_OR_RETURN(auto dead, store.runs().Runs(id, RunState::kDead, 0));
    for (const auto& r : dead) ids.push_back(r.id);
  } else {
    ids.push_back(id);
  }
  json done = json::array();
  for (auto run_id : ids) {
    TRY(store.runs().RetryRun(run_id, now, who));
    ASSIGN_OR_RETURN(auto r, store.runs().Run(run_id));
    if (!r) continue;
    ASSIGN_OR_RETURN(auto hist, store.runs().Retries(run_id));
    if (hist.empty()) continue;
    const RunRetry& last = hist.back();
    done.push_back({{"run", run_id},
                    {"was", std::string(RunStateName(last.state))},
                    {"attempts", last.attempts},
                    {"max_attempts", r->max_attempts},
                    {"retries", r->retries},
                    {"error", last.last_error}});
  }
  return json{{"retried", done}};
}

void PrintRetried(const json& retried, std::int64_t id, bool batch, std::ostream& out) {
  const json& done = retried.at("retried");
  for (const auto& d : done) {
    std::string error = d.value("error", "");
    out << "run " << d.at("run").get<std::int64_t>() << " queued again (was "
        << d.at("was").get<std::string>() << " after " << d.at("attempts").get<int>()
        << " attempt(s)" << (error.empty() ? "" : ": ") << OneLine(error, 120) << "); "
        << d.at("max_attempts").get<int>() << " attempt(s) from now\n";
  }
  if (batch && done.empty()) out << "batch " << id << " has no dead runs; nothing to retry\n";
}

}  // namespace trainq
