// StoreParts: what a Store owns (queue/store.h), for the queue/ sources only.
// One connection and the options, and the concern parts built over them; a
// part reaches another through parts_ (a drain or a machine lease reads and
// writes several concerns' tables inside one transaction).
#pragma once

#include "queue/access.h"
#include "queue/gangs.h"
#include "queue/machines.h"
#include "queue/outbox.h"
#include "queue/pushes.h"
#include "queue/retention.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "queue/sweeps.h"

namespace trainq {

// The SQL expression of a run's next lease (fencing) token: larger than the
// last one (a stale token stays stale) by 1 + a random 32-bit step from
// SQLite's random() (seeded from the OS's randomness), and never below 2^32.
// The pool token is all a machine of a pool shows on run routes, so the lease
// token is what keeps one machine from acting on another's lease: it must
// not be guessable (a counter from 1 was). Stays below 2^53 for any real
// number of leases of one run (2^20 of them), exact in any JSON reader.
inline constexpr const char* kNextLeaseToken =
    "max(lease_token, 4294967296) + 1 + (random() & 4294967295)";

struct StoreParts {
  StoreParts(sql::Db d, StoreOptions o)
      : db(std::move(d)), options(o), runs(*this), pushes(*this), machines(*this), gangs(*this),
        sweeps(*this), retention(*this), access(*this), outbox(*this) {}
  StoreParts(const StoreParts&) = delete;
  StoreParts& operator=(const StoreParts&) = delete;

  TimeMs BackoffMs(int attempt) const;

  sql::Db db;
  StoreOptions options;
  RunQueue runs;
  Pushes pushes;
  Machines machines;
  Gangs gangs;
  Sweeps sweeps;
  Retention retention;
  Access access;
  Outbox outbox;
};

}  // namespace trainq
