// Every call to the queue, and the backoff after a failure (worker_link.h).
#include "agent/runner/worker_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/runner/protocol.h"
#include "core/strings.h"

namespace trainq {

WorkerLink::WorkerLink(std::unique_ptr<LeaseClient> own, LeaseClient* client, const Clock& clock,
                       TimeMs retry_base_ms, TimeMs retry_max_ms)
    : own_client_(std::move(own)),
      client_(client ? *client : *own_client_),
      clock_(clock),
      retry_base_ms_(retry_base_ms),
      retry_max_ms_(retry_max_ms),
      last_contact_ms_(clock.Now()) {}

Result<WireAnswer> WorkerLink::Send(WireCall call) {
  // Run routes want to know which machine calls (its pool's token is shared):
  // a body names it itself (worker_id), or this header does.
  if (machine_ && !FindHeader(call.headers, "X-Trainq-Worker")) {
    call.headers.emplace_back("X-Trainq-Worker", std::to_string(*machine_));
  }
  auto a = client_.Send(call);
  TimeMs now = clock_.Now();
  if (!a) {
    NoteFailure(a.error());
    return std::unexpected(a.error());
  }
  if (a->status >= 500) {
    Error e{ErrorKind::kUnavailable, "POST " + client_.Where() + call.path + ": HTTP " +
                                         std::to_string(a->status) + " " + AnswerError(a->body)};
    NoteFailure(e);
    return std::unexpected(e);
  }
  last_contact_ms_ = now;
  backoff_ms_ = 0;
  return a;
}

Result<WireAnswer> WorkerLink::Call(const std::string& path, const nlohmann::json& body,
                                    TimeMs timeout_ms) {
  WireCall call;
  call.path = path;
  call.body = body.dump();
  call.timeout_ms = timeout_ms;
  return Send(std::move(call));
}

void WorkerLink::NoteFailure(const Error& e) {
  backoff_ms_ = backoff_ms_ == 0 ? retry_base_ms_ : std::min(backoff_ms_ * 2, retry_max_ms_);
  next_try_ms_ = clock_.Now() + backoff_ms_;
  spdlog::warn("server not reachable: {}; next try in {}", e.message, FormatDuration(backoff_ms_));
}

}  // namespace trainq
