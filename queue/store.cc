// Store (queue/store.h): opening a database file (creating it whole, refusing
// what is not a trainq queue, migrating it) and the parts over its connection.
#include "queue/store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include "queue/store_parts.h"

namespace trainq {

namespace {

int FineBusyWait(void* timeout_ms, int count) {
  // ~0.1 ms for the first 10 tries, then 1 ms: `count` tries take at most
  // about count - 9 ms after the first millisecond.
  auto limit = reinterpret_cast<std::intptr_t>(timeout_ms);  // the value, not a pointer
  if (count >= 10 && count - 9 > limit) return 0;
  struct timespec ts{0, count < 10 ? 100'000L : 1'000'000L};
  nanosleep(&ts, nullptr);
  return 1;
}

}  // namespace

Store::Store(std::unique_ptr<StoreParts> parts) : parts_(std::move(parts)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const std::string& Store::path() const { return parts_->db.path(); }
RunQueue& Store::runs() { return parts_->runs; }
Pushes& Store::pushes() { return parts_->pushes; }
Machines& Store::machines() { return parts_->machines; }
Gangs& Store::gangs() { return parts_->gangs; }
Sweeps& Store::sweeps() { return parts_->sweeps; }
Retention& Store::retention() { return parts_->retention; }
Access& Store::access() { return parts_->access; }
Outbox& Store::outbox() { return parts_->outbox; }

// A new database appears at `path` whole: made and migrated under a
// temporary name, then linked into place (link fails on an existing name, so
// of processes creating it at once one wins and the others open its file).
// Another process thus never sees an empty file at `path`, and an empty file
// there can only be a damaged or emptied database (refused by Open).
Status Store::CreateWhole(const std::string& path, const StoreOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path + "-wal", ec)) {
    return Fail(ErrorKind::kInvalidArgument,
                path + " does not exist, but its write-ahead log " + path +
                    "-wal does (the database was deleted or moved without it): nothing was "
                    "created, since a new database would replay that log. Restore the "
                    "database beside it, or move " + path + "-wal away");
  }
  char tag[64];
  std::snprintf(tag, sizeof tag, ".creating-%d-%llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(
                    std::chrono::steady_clock::now().time_since_epoch().count()));
  const std::string tmp = path + tag;
  {
    ASSIGN_OR_RETURN(auto db, sql::Db::Open(tmp, true, options.busy_timeout_ms));
    TRY(db.Exec("PRAGMA journal_mode=WAL"));
    if (auto st = MigrateToCurrent(db); !st) {
      fs::remove(tmp, ec);
      return st;
    }
  }  // closed: the WAL is checkpointed into the file and removed
  for (const char* suffix : {"-wal", "-shm"}) fs::remove(tmp + suffix, ec);
  int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  fs::remove(tmp, ec);
  if (linked != 0 && link_errno != EEXIST) {
    return Fail(ErrorKind::kIo, path + ": cannot create the database: " +
                                    std::strerror(link_errno));
  }
  return {};
}

// A PostgreSQL database (docs/design/postgres.md): it must exist (made by
// the operator, as for any service on a shared server); trainq writes its
// schema into it when it holds no tables, and refuses one that holds
// another program's tables.
Result<Store> Store::OpenPostgres(const std::string& url, StoreOptions options) {
  ASSIGN_OR_RETURN(auto db, sql::Db::Open(url, false, options.busy_timeout_ms));
  {
    ASSIGN_OR_RETURN(auto probe,
                     db.Prepare("SELECT count(*) FROM information_schema.tables "
                                "WHERE table_schema = current_schema()"));
    ASSIGN_OR_RETURN(bool row, probe.Step());
    if (row && probe.Int(0) > 0 && SchemaVersion(db) == 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  db.path() + ": not a trainq database (it holds other tables); pass --db "
                              "with an empty database or a trainq store");
    }
  }
  TRY(MigrateToCurrent(db));
  return Store(std::make_unique<StoreParts>(std::move(db), options));
}

Result<Store> Store::Open(const std::string& path, StoreOptions options) {
  if (sql::IsPostgresUrl(path)) return OpenPostgres(path, options);
  std::error_code exists_ec;
  bool existed = std::filesystem::exists(path, exists_ec);
  if (options.create && !existed) {
    auto parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    TRY(CreateWhole(path, options));
    existed = true;
  }
  ASSIGN_OR_RETURN(auto db, sql::Db::Open(path, false, options.busy_timeout_ms));
  // Another program's SQLite file (tables, but no trainq schema version) is
  // refused before anything is written to it.
  {
    auto probe = db.Prepare(
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_master WHERE type = 'table')");
    if (!probe) {
      Error e = probe.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
    auto row = probe->Step();
    if (!row) {
      Error e = row.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
    if (*row && probe->Int(0) == 0 && probe->Int(1) > 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  path + ": not a trainq database (it holds other tables); pass --db with a "
                         "new file or a trainq store");
    }
    if (*row && probe->Int(0) == 0 && probe->Int(1) == 0 && existed &&
        !options.initialize_existing) {
      std::error_code ec;
      auto size = std::filesystem::file_size(path, ec);
      return Fail(ErrorKind::kInvalidArgument,
                  path + ": the file exists but holds no trainq queue (" +
                      (ec ? std::string("empty") : std::to_string(size) + " bytes") +
                      "); nothing was written to it. If it held your queue, restore it from a "
                      "backup; to start a new queue in this file, run `trainq --db " + path +
                      " init`");
    }
  }
  // WAL lets readers (trainq status) work while the daemon writes.
  // synchronous=FULL makes every acknowledged commit durable.
  {
    auto wal = db.Prepare("PRAGMA journal_mode=WAL");
    if (!wal) return std::unexpected(wal.error());
    if (auto r = wal->Step(); !r) {
      Error e = r.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
  }  // the statement must be finished before any transaction commits
  TRY(db.Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"));
  TRY(MigrateToCurrent(db));
  return Store(std::make_unique<StoreParts>(std::move(db), options));
}

Result<std::vector<std::string>> Store::QuickCheck(int max_lines) {
  // PostgreSQL checks its own pages (data checksums, amcheck): not trainq's.
  if (parts_->db.is_postgres()) return std::vector<std::string>{"ok"};
  ASSIGN_OR_RETURN(auto st, parts_->db.Prepare("PRAGMA quick_check(" + std::to_string(max_lines) + ")"));
  std::vector<std::string> lines;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    lines.push_back(st.Text(0));
  }
  return lines;
}

int Store::schema_version() { return SchemaVersion(parts_->db); }

TimeMs Store::BackoffMs(int attempt) const { return parts_->BackoffMs(attempt); }

TimeMs StoreParts::BackoffMs(int attempt) const {
  TimeMs d = options.backoff_base_ms;
  for (int i = 1; i < attempt && d < options.backoff_cap_ms; ++i) d *= 2;
  return std::min(d, options.backoff_cap_ms);
}

void Store::UseFineBusyWait() {
  if (parts_->db.is_postgres()) return;  // a lock wait there wakes when the lock is free
  sqlite3_busy_handler(parts_->db.raw(), FineBusyWait,
                       reinterpret_cast<void*>(
                           static_cast<std::intptr_t>(parts_->options.busy_timeout_ms)));
}

Status Store::InWriteTransaction(const std::function<Status()>& fn) {
  return sql::WithWriteTransaction(parts_->db, fn);
}

Status Store::InRelaxedWriteTransaction(const std::function<Status()>& fn) {
  sql::Db& db = parts_->db;
  if (db.InTransaction()) return fn();
  if (db.is_postgres()) {
    // The same trade on PostgreSQL: this commit does not wait for its WAL flush.
    return sql::WithWriteTransaction(db, [&]() -> Status {
      TRY(db.Exec("SET LOCAL synchronous_commit = off"));
      return fn();
    });
  }
  TRY(db.Exec("PRAGMA synchronous=NORMAL"));
  auto st = sql::WithWriteTransaction(db, fn);
  auto full = db.Exec("PRAGMA synchronous=FULL");
  if (!st) return st;
  return full;
}

}  // namespace trainq
