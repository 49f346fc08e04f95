// Results kept while the server was away (agent/runner/result_outbox.h):
// keeping one, delivering them oldest first when the server answers again,
// and naming those held in memory only when the worker ends.
#include "agent/runner/worker_outbox.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "agent/runner/protocol.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

KeptResults::KeptResults(WorkerLink& link, const Clock& clock, const std::string& data_dir)
    : link_(link), clock_(clock), dir_((fs::path(data_dir) / "outbox").string()), outbox_(dir_) {}

void KeptResults::Keep(const PendingResult& kept, const std::string& what, const std::string& why,
                       TimeMs retry_ms) {
  const std::string outcome = kept.complete.value("outcome", std::string());
  maybe_holding_ = true;
  next_deliver_ms_ = clock_.Now() + retry_ms;
  if (auto st = outbox_.Put(kept); st) {
    spdlog::warn("{}: server not reachable ({}); its result ({}) is kept in {} and "
                 "delivered when the server is back",
                 what, why, outcome, outbox_.PathOf(kept.run_id, kept.node_rank));
  } else {
    // Not on disk: held in memory, written and delivered when either can be.
    spdlog::error("{}: server not reachable ({}), and its result ({}) cannot be kept on disk "
                  "({}); it is held in memory, and written to disk or delivered as soon as "
                  "either works (it is lost only if this worker ends first)",
                  what, why, outcome, st.error().message);
    persist_failing_ = true;
    persist_error_ = st.error().message;
  }
}

void KeptResults::DeliverIfDue(TimeMs retry_ms) {
  if (!maybe_holding_ || clock_.Now() < next_deliver_ms_) return;
  next_deliver_ms_ = clock_.Now() + retry_ms;
  Deliver();
}

void KeptResults::Deliver() {
  if (outbox_.held() > 0) {
    const std::size_t held = outbox_.held();
    if (auto st = outbox_.Persist(); st) {
      // Said again now, since a log on the full disk may have lost the first time.
      spdlog::info(
          "{} result(s) held in memory (not written then: {}) are now kept on disk in "
          "{}",
          held, persist_error_, dir_);
      persist_failing_ = false;
    } else if (!persist_failing_) {
      spdlog::error("{} result(s) held in memory still cannot be written: {}", held,
                    st.error().message);
      persist_failing_ = true;
      persist_error_ = st.error().message;
    }
  }
  for (const auto& k : outbox_.All()) {
    const std::string path = "/api/v1/runs/" + std::to_string(k.run_id);
    // Points and output first (a 409 there: the lease expired; the result may
    // still be taken), then the result itself.
    // The machine the run was leased to (an earlier worker on this data dir
    // may have kept it): named in what is delivered.
    auto envelope = ParseRunEnvelope(k.complete, "kept result");
    const std::optional<std::int64_t> leased_to =
        envelope ? envelope->worker_id : std::optional<std::int64_t>();
    if (!k.points.empty()) {
      auto m = ParseMetricsRequest(json{{"token", k.token()}, {"points", k.points}});
      if (m) {
        m->worker_id = leased_to;
        if (!link_.Call(path + "/metrics", ToJson(*m))) return;
      } else {
        spdlog::warn("run {}: kept metric points not sent: {}", k.run_id, m.error().message);
      }
    }
    if (!k.log.empty()) {
      WireCall req;
      req.path = path + "/log";
      req.content_type = "application/octet-stream";
      req.headers = {{"X-Trainq-Token", std::to_string(k.token())},
                     {"X-Trainq-Offset", std::to_string(k.log_offset)}};
      if (leased_to) req.headers.emplace_back("X-Trainq-Worker", std::to_string(*leased_to));
      req.body = k.log;
      if (!link_.Send(req)) return;
    }
    // A gang member's result goes where its beats went.
    auto a = link_.Call(path + (k.node_rank >= 0 ? "/gang" : "/complete"), k.complete);
    if (!a) return;  // still away: after the backoff
    const std::string outcome = k.complete.value("outcome", std::string());
    const std::string what = k.node_rank >= 0 ? fmt::format("gang run {} node {}", k.run_id,
                                                            k.node_rank)
                                              : fmt::format("run {}", k.run_id);
    if (a->status == 200) {
      spdlog::info("{}: kept result delivered ({})", what, outcome);
    } else {
      spdlog::warn("{}: kept result ({}) refused: HTTP {} {}", what, outcome, a->status,
                   AnswerError(a->body));
    }
    outbox_.Remove(k.run_id, k.node_rank);
  }
  maybe_holding_ = false;
  persist_failing_ = false;
}

void KeptResults::ReportHeldLost() {
  for (const auto& k : outbox_.All()) {
    if (outbox_.held() == 0) break;
    const std::string path = outbox_.PathOf(k.run_id, k.node_rank);
    if (fs::exists(path)) continue;
    spdlog::error("run {}: its result ({}) was held in memory only (the disk was full) and is "
                  "lost with this worker; the run's lease will expire and it runs again",
                  k.run_id, k.complete.value("outcome", std::string()));
  }
}

}  // namespace trainq
