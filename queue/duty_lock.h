// The right to do what must happen once per store: the fleet and its
// autoscaler, polling and the push pipeline, the sweep driver, retention and
// the outboxes (docs/design/postgres.md, "Replicas").
//
// On SQLite one `trainq serve` owns its file, and this process always holds
// the duties. On PostgreSQL any number of `trainq serve` replicas share a
// database; the duties go to the one holding a session-level advisory lock
// (pg_try_advisory_lock) on a connection of its own, kept for nothing else.
// When that process dies its backend ends and PostgreSQL releases the lock;
// another replica, trying every few seconds, takes it. The connection asks
// the server to probe it (TCP keepalives, tcp_user_timeout) so that a holder
// whose host vanished loses the lock within about 15 s rather than the
// kernel's two hours; a holder killed on a live host closes its socket at
// once. The lock's key is per schema, so stores in separate schemas of one
// database (the tests') have separate duties.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"

namespace trainq {

class DutyLock {
 public:
  // No connection yet: the first Hold() connects (SQLite: none ever).
  explicit DutyLock(std::string location);
  ~DutyLock();
  DutyLock(DutyLock&&) noexcept;
  DutyLock& operator=(DutyLock&&) noexcept;

  // True when this process holds the duties now: on PostgreSQL, takes the
  // lock when free (connecting first if needed), or checks that the
  // connection holding it still lives. An error: the database could not be
  // reached (the lock, if held, is gone with its connection).
  Result<bool> Hold();
  // Gives the lock up (closes its connection).
  void Release();
  // True on PostgreSQL: replicas may share the store.
  bool shared() const { return shared_; }

 private:
  struct Conn;
  std::string location_;
  bool shared_ = false;
  bool held_ = false;
  std::unique_ptr<Conn> conn_;
};

}  // namespace trainq
