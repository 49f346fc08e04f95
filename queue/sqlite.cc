#include "queue/sqlite.h"

#include "queue/postgres.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <list>
#include <unordered_map>

namespace trainq::sql {

namespace {

ErrorKind KindFor(int code) {
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    // A full disk passes once space is freed: the daemon retries and keeps
    // serving (reads work), where an I/O error would end it.
    case SQLITE_FULL: return ErrorKind::kUnavailable;
    case SQLITE_CONSTRAINT: return ErrorKind::kConflict;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return ErrorKind::kCorruption;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_PERM: return ErrorKind::kIo;
    default: return ErrorKind::kInternal;
  }
}

thread_local std::int64_t vm_steps = 0;

}  // namespace

// SQLITE_FULL with a mark of ours (SQLite has no extended codes of
// SQLITE_FULL): a write refused with EFBIG.
constexpr int kFileSizeLimit = SQLITE_FULL | (1 << 8);

std::int64_t VmSteps() { return vm_steps; }

void Stmt::CountSteps() {
  if (stmt_) vm_steps += sqlite3_stmt_status(stmt_, SQLITE_STMTSTATUS_VM_STEP, /*reset=*/1);
}

// True when this process has a file size limit (ulimit -f) and the database,
// its WAL or its journal is within a WAL frame or two of it.
static bool AtFileSizeLimit(const std::string& path) {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_FSIZE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return false;
  constexpr std::uintmax_t kMargin = 64 * 1024;
  for (const char* suffix : {"", "-wal", "-journal"}) {
    std::error_code ec;
    auto size = std::filesystem::file_size(path + suffix, ec);
    if (!ec && size + kMargin >= static_cast<std::uintmax_t>(lim.rlim_cur)) return true;
  }
  return false;
}

// SQLite reports a write on a full or read-only filesystem as a plain I/O
// error at times (the -shm file, the WAL): the OS error tells them apart.
// When SQLite kept no OS error, the filesystem of the file says it.
static int Classify(sqlite3* db, int code, const std::string& path) {
  if ((code & 0xff) != SQLITE_IOERR && (code & 0xff) != SQLITE_CANTOPEN) return code;
  int sys = db ? sqlite3_system_errno(db) : 0;
  if (sys == ENOSPC || sys == EDQUOT) return SQLITE_FULL;
  // A write past the process's file size limit (ulimit -f; SIGXFSZ is
  // ignored, core/fatal_signals.h): passes once the limit is raised, as a
  // full disk does once space is freed. Marked for its own hint.
  if (sys == EFBIG) return kFileSizeLimit;
  if (sys == EROFS) return SQLITE_READONLY;
  // SQLite keeps the OS error of its last call on the VFS, not of the write
  // that failed, so EFBIG is often lost: a finite file size limit that the
  // database or its WAL has reached says it instead.
  if ((code & 0xff) == SQLITE_IOERR && AtFileSizeLimit(path)) return kFileSizeLimit;
  auto dir = std::filesystem::path(path).parent_path();
  struct statvfs fs {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0) {
    if (fs.f_flag & ST_RDONLY) return SQLITE_READONLY;
    if (fs.f_bavail == 0) return SQLITE_FULL;
  }
  return code;
}

static std::string Hint(int code) {
  if (code == kFileSizeLimit) {
    return " (the database file reached this process's file size limit, ulimit -f: nothing "
           "was written; raise the limit and retry)";
  }
  switch (code & 0xff) {
    case SQLITE_FULL:
      return " (the disk holding the database is full: nothing was written; free space and retry)";
    case SQLITE_READONLY:
      return " (the database is read-only: trainq must be able to write it, its directory and "
             "its -wal and -shm files; a read-only filesystem or file mode, or another user's "
             "file)";
    case SQLITE_IOERR:
      return " (the filesystem failed the write or read: a full disk, a read-only or a failing "
             "filesystem)";
    case SQLITE_CANTOPEN:
      return " (cannot open or create it: the directory must exist and be writable, with space "
             "for the -wal and -shm files)";
    default:
      return "";
  }
}

struct StmtCache {
  bool closed = false;
  // Oldest returned first; the index finds one by its SQL text.
  std::list<std::pair<std::string, sqlite3_stmt*>> kept;
  std::unordered_multimap<std::string_view, decltype(kept)::iterator> by_sql;

  sqlite3_stmt* Take(std::string_view sql) {
    auto it = by_sql.find(sql);
    if (it == by_sql.end()) return nullptr;
    auto pos = it->second;
    by_sql.erase(it);
    sqlite3_stmt* stmt = pos->second;
    kept.erase(pos);
    return stmt;
  }

  // Keeps `stmt` (reset, bindings cleared); false when it is not kept.
  bool Give(sqlite3_stmt* stmt) {
    if (closed) return false;
    const char* text = sqlite3_sql(stmt);
    if (!text) return false;
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    kept.emplace_back(text, stmt);
    auto pos = std::prev(kept.end());
    by_sql.emplace(std::string_view(pos->first), pos);
    if (kept.size() > Db::kCachedStatements) Drop(kept.begin());
    return true;
  }

  void Drop(decltype(kept)::iterator pos) {
    auto [b, e] = by_sql.equal_range(std::string_view(pos->first));
    for (auto i = b; i != e; ++i) {
      if (i->second == pos) {
        by_sql.erase(i);
        break;
      }
    }
    sqlite3_finalize(pos->second);
    kept.erase(pos);
  }

  void Close() {
    closed = true;
    while (!kept.empty()) Drop(kept.begin());
  }
};

void Stmt::Release() {
  pg_.reset();
  CountSteps();
  if (!stmt_) return;
  if (!cache_ || !cache_->Give(stmt_)) sqlite3_finalize(stmt_);
  stmt_ = nullptr;
  cache_.reset();
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    Release();
    db_ = o.db_;
    stmt_ = o.stmt_;
    cache_ = std::move(o.cache_);
    pg_ = std::move(o.pg_);
    o.stmt_ = nullptr;
  }
  return *this;
}

Stmt::~Stmt() { Release(); }

Stmt& Stmt::Bind(int i, std::int64_t v) {
  if (pg_) {
    PgBind(*pg_, i, std::to_string(v));
    return *this;
  }
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, double v) {
  if (pg_) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    PgBind(*pg_, i, buf);
    return *this;
  }
  sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, std::string_view v) {
  if (pg_) {
    PgBind(*pg_, i, std::string(v));
    return *this;
  }
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::BindNull(int i) {
  if (pg_) {
    PgBindNull(*pg_, i);
    return *this;
  }
  sqlite3_bind_null(stmt_, i);
  return *this;
}

Result<bool> Stmt::Step() {
  if (pg_) return PgStep(*pg_);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string msg = sqlite3_errmsg(db_);
  std::string file = sqlite3_db_filename(db_, "main") ? sqlite3_db_filename(db_, "main") : "";
  int code = Classify(db_, sqlite3_extended_errcode(db_), file);
  sqlite3_reset(stmt_);
  if ((code & 0xff) == SQLITE_BUSY) {
    msg += " (another trainq process held the write lock past the busy timeout)";
  }
  return Fail(KindFor(code), file + ": " + msg + Hint(code));
}

Status Stmt::Run() {
  while (true) {
    auto r = Step();
    if (!r) return std::unexpected(r.error());
    if (!*r) break;
  }
  Reset();
  return {};
}

void Stmt::Reset() {
  if (pg_) {
    pg_->Clear();
    pg_->null.assign(pg_->null.size(), true);
    return;
  }
  CountSteps();
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Stmt::Text(int col) const {
  if (pg_) {
    const char* v = PgValue(*pg_, col);
    return v ? std::string(v) : std::string();
  }
  auto p = sqlite3_column_text(stmt_, col);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::optional<std::int64_t> Stmt::OptInt(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Int(col);
}

std::optional<double> Stmt::OptDouble(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Double(col);
}

void Db::Close() {
  pg_.reset();
  if (cache_) cache_->Close();
  cache_.reset();
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
}

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    Close();
    db_ = o.db_;
    path_ = std::move(o.path_);
    cache_ = std::move(o.cache_);
    pg_ = std::move(o.pg_);
    o.db_ = nullptr;
  }
  return *this;
}

Db::Db(Db&& o) noexcept
    : db_(o.db_), path_(std::move(o.path_)), cache_(std::move(o.cache_)), pg_(std::move(o.pg_)) {
  o.db_ = nullptr;
}

Db::~Db() { Close(); }

Result<Db> Db::Open(const std::string& path, bool create, int busy_timeout_ms) {
  if (IsPostgresUrl(path)) {
    ASSIGN_OR_RETURN(auto pg, OpenPostgres(path));
    // The busy timeout bounds a wait for the write lock, as on SQLite.
    TRY(pg.Exec("SET lock_timeout = " + std::to_string(busy_timeout_ms) +
                "; SET client_min_messages = warning"));
    return pg;
  }
  Db db;
  db.path_ = path;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (create) flags |= SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db.db_ ? sqlite3_errmsg(db.db_) : sqlite3_errstr(rc);
    if (!create && (rc & 0xff) == SQLITE_CANTOPEN) {
      return Fail(ErrorKind::kNotFound,
                  path + ": no such database (run `trainq submit` or `trainq serve` first, or "
                         "pass --db)");
    }
    rc = Classify(db.db_, rc, path);
    return Fail(KindFor(rc), path + ": cannot open database: " + msg + Hint(rc));
  }
  sqlite3_busy_timeout(db.db_, busy_timeout_ms);
  sqlite3_extended_result_codes(db.db_, 1);
  return db;
}

Result<Stmt> Db::Prepare(std::string_view sql) {
  if (pg_) return PreparePostgres(sql);
  if (!cache_) cache_ = std::make_shared<StmtCache>();
  if (sqlite3_stmt* kept = cache_->Take(sql)) return Stmt(db_, kept, cache_);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return std::unexpected(LastError("prepare"));
  // Kept for reuse only when SQLite's copy of the text is the key a later
  // Prepare looks up (not, say, the first of several statements).
  const char* text = sqlite3_sql(stmt);
  if (!text || std::string_view(text) != sql) return Stmt(db_, stmt);
  return Stmt(db_, stmt, cache_);
}

Status Db::Exec(std::string_view sql) {
  if (pg_) return ExecPostgres(sql);
  std::string s(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if ((rc & 0xff) == SQLITE_BUSY) {
      msg += " (another trainq process held the write lock past the busy timeout)";
    }
    int code = Classify(db_, sqlite3_extended_errcode(db_), path_);
    return Fail(KindFor(code), path_ + ": " + msg + Hint(code));
  }
  return {};
}

Error Db::LastError(std::string_view what) const {
  if (pg_) {
    return Error{ErrorKind::kInternal,
                 path_ + ": " + std::string(what) + ": " + PQerrorMessage(pg_->conn)};
  }
  int code = Classify(db_, sqlite3_extended_errcode(db_), path_);
  return Error{KindFor(code),
               path_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_) + Hint(code)};
}

}  // namespace trainq::sql
