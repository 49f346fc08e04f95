// Store: trainq's durable state in one SQLite file.
//
// Holds repositories, commits, batches (one per commit x experiment), runs (one
// per batch x seed), metrics, machines, pushes and webhook deliveries. Store
// owns the connection; the state is split by concern into parts that share it,
// each with its own header (include the one you use):
//
//   store.runs()      queue/run_queue.h  batches, runs, metrics, the lease protocol
//   store.pushes()    queue/pushes.h     pushes, deliveries, ref heads, commit
//                                        statuses, quiet commits, PR comments
//   store.machines()  queue/machines.h   machines, leases to machines, pools, costs
//   store.gangs()     queue/gangs.h      runs over several machines at once
//   store.sweeps()    queue/sweeps.h     hyperparameter searches
//   store.access()    queue/access.h     personal API tokens, the audit trail
//   store.outbox()    queue/outbox.h     messages to outside services, sent once
//
// The schema and its migrations are in queue/schema.h.
//
// Every write runs in BEGIN IMMEDIATE with a busy timeout; the file uses WAL
// and synchronous=FULL, so an acknowledged write survives a power cut. A write
// that spans concerns (a drain reads the run queue and writes the machine) is
// one transaction on the shared connection.
// Threading: a Store is one connection; use one per thread. Several processes
// may open the same file (the daemon writes, `trainq status` reads).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/schema.h"

namespace trainq {

struct StoreOptions {
  int busy_timeout_ms = 5000;
  TimeMs backoff_base_ms = 10'000;    // first retry after 10 s, then 20 s, 40 s ...
  TimeMs backoff_cap_ms = 15 * 60'000;
  bool create = true;                 // create the file when missing
  // Write the schema into a file that exists but holds none (0 bytes, or an
  // empty SQLite file). Only `trainq init` sets it: otherwise such a file is
  // refused, since a database emptied by a bad restore or an interrupted
  // copy must not silently become an empty queue.
  bool initialize_existing = false;
  bool read_only_ok = false;          // reserved
};

class RunQueue;
class Pushes;
class Machines;
class Gangs;
class Sweeps;
class Retention;
class Access;
class Outbox;
struct StoreParts;

class Store {
 public:
  static inline constexpr int kSchemaVersion = kStoreSchemaVersion;

  // `path` is a SQLite file, or a postgres:// URL of an existing PostgreSQL
  // database (docs/design/postgres.md).
  static Result<Store> Open(const std::string& path, StoreOptions options = {});
  // PRAGMA quick_check: "ok", or the problems it lists (at most `max_lines`).
  Result<std::vector<std::string>> QuickCheck(int max_lines = 20);
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& path() const;
  int schema_version();

  // How long a run waits after failed attempt `attempt` (1, 2, ...).
  TimeMs BackoffMs(int attempt) const;

  // Waits for a busy write lock in steps of at most 1 ms (up to the store's
  // busy timeout) instead of SQLite's default back-off, whose sleeps grow to
  // 100 ms: for connections that answer webhooks while other threads write.
  void UseFineBusyWait();

  // Runs `fn` in one write transaction: the calls it makes on the parts join
  // it and commit together (or roll back together when fn fails).
  Status InWriteTransaction(const std::function<Status()>& fn);
  // The same, committed without an fsync of the WAL (synchronous=NORMAL
  // for this commit alone): a power loss may lose it, a crash of serve may
  // not, and the next ordinary commit makes it durable too. For a worker's
  // heartbeat: one every 10 s per worker, and losing the newest ones only
  // moves a lease's expiry back. Inside a transaction already, `fn` joins it.
  Status InRelaxedWriteTransaction(const std::function<Status()>& fn);

  // The parts, by concern; each lives as long as this Store (and moves with it).
  RunQueue& runs();
  Pushes& pushes();
  Machines& machines();
  Gangs& gangs();
  Sweeps& sweeps();
  Retention& retention();
  Access& access();
  Outbox& outbox();  // queue/outbox.h: messages to outside services, sent once

 private:
  explicit Store(std::unique_ptr<StoreParts> parts);
  static Status CreateWhole(const std::string& path, const StoreOptions& options);
  static Result<Store> OpenPostgres(const std::string& url, StoreOptions options);

  std::unique_ptr<StoreParts> parts_;
};

}  // namespace trainq
