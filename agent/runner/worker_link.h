// WorkerLink: one of the Worker's parts (agent/runner/worker.h). Every call
// the worker makes to the queue goes through it: it names the calling
// machine (X-Trainq-Worker, once registered), counts any answer below 500 as
// contact, and after a failure (no answer, or a 5xx) backs off, doubling from
// retry_base_ms to retry_max_ms. The worker's register and lease wait for the
// backoff (Ready); other calls go out whenever they are due.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/runner/lease_client.h"
#include "core/clock.h"
#include "core/result.h"

namespace trainq {

class WorkerLink {
 public:
  // Through `client`, or through `own` when `client` is null.
  WorkerLink(std::unique_ptr<LeaseClient> own, LeaseClient* client, const Clock& clock,
             TimeMs retry_base_ms, TimeMs retry_max_ms);

  // One call; an Error for no answer and for a 5xx (both start or double the
  // backoff). Adds X-Trainq-Worker when a machine is set and the call names none.
  Result<WireAnswer> Send(WireCall call);
  // A JSON body to `path`.
  Result<WireAnswer> Call(const std::string& path, const nlohmann::json& body,
                          TimeMs timeout_ms = 15'000);
  // Starts or doubles the backoff (also for an answer the caller finds wrong).
  void NoteFailure(const Error& e);

  // Whether the backoff is over.
  bool Ready(TimeMs now) const { return now >= next_try_ms_; }
  // Whether the last call failed (no backoff after a success).
  bool BackingOff() const { return backoff_ms_ != 0; }
  TimeMs backoff_ms() const { return backoff_ms_; }
  // The last answer below 500 (the link's construction before any).
  TimeMs last_contact_ms() const { return last_contact_ms_; }
  std::string Where() const { return client_.Where(); }

  // The machine this worker registered as (register's worker_id).
  const std::optional<std::int64_t>& machine() const { return machine_; }
  void set_machine(std::optional<std::int64_t> id) { machine_ = id; }

 private:
  std::unique_ptr<LeaseClient> own_client_;
  LeaseClient& client_;
  const Clock& clock_;
  TimeMs retry_base_ms_;
  TimeMs retry_max_ms_;
  std::optional<std::int64_t> machine_;
  TimeMs last_contact_ms_;
  TimeMs next_try_ms_ = 0;
  TimeMs backoff_ms_ = 0;
};

}  // namespace trainq
