// KeptResults: one of the Worker's parts (agent/runner/worker.h), the
// delivery of results the server was away for. A result the worker could not
// report is kept in <data_dir>/outbox (agent/runner/result_outbox.h; in
// memory while the disk refuses it) with the metric points and output the
// server has not seen; Deliver sends them, oldest first, through the
// WorkerLink, and stops at the first one that gets no answer.
#pragma once

#include <string>

#include "agent/runner/result_outbox.h"
#include "agent/runner/worker_link.h"
#include "core/clock.h"

namespace trainq {

class KeptResults {
 public:
  KeptResults(WorkerLink& link, const Clock& clock, const std::string& data_dir);

  // Keeps `kept` (on disk, else in memory) and says so; `what` names the run,
  // `why` the failed delivery. The next try is `retry_ms` from now.
  void Keep(const PendingResult& kept, const std::string& what, const std::string& why,
            TimeMs retry_ms);
  // Delivers when something may be kept and its next try is due (each
  // heartbeat while something is kept, whatever the register/lease backoff:
  // a delivery before the lease expires keeps the run's attempt).
  void DeliverIfDue(TimeMs retry_ms);
  // Delivers the results kept, oldest first; stops at the first one the
  // server does not answer. An answer that refuses one (4xx) drops it.
  void Deliver();
  // Names the results held in memory only, when the worker ends with them.
  void ReportHeldLost();
  // Whether something may be kept (true at the start: the outbox is read
  // then; false after a delivery that got through).
  bool maybe_holding() const { return maybe_holding_; }

 private:
  WorkerLink& link_;
  const Clock& clock_;
  std::string dir_;      // <data_dir>/outbox
  ResultOutbox outbox_;  // in dir_
  bool maybe_holding_ = true;
  TimeMs next_deliver_ms_ = 0;
  bool persist_failing_ = false;  // outbox_ holds results the disk refused (said once)
  std::string persist_error_;     // why, the last time
};

}  // namespace trainq
