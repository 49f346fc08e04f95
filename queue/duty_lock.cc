// DutyLock (queue/duty_lock.h): a session-level advisory lock on a libpq
// connection of its own; on SQLite, always held.
#include "queue/duty_lock.h"

#include <libpq-fe.h>

#include <utility>

#include "queue/sqlite.h"

namespace trainq {

namespace {

// The lock's two keys: a constant ("tqdu") and the schema's hash, so that
// stores in separate schemas of one database do not share duties. (The
// two-key form never conflicts with the one-key write lock of
// queue/postgres.cc.)
constexpr const char* kTryLock =
    "SELECT pg_try_advisory_lock(1953588341, hashtext(current_schema()))";

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

struct DutyLock::Conn {
  PGconn* conn = nullptr;
  ~Conn() {
    if (conn) PQfinish(conn);
  }
};

DutyLock::DutyLock(std::string location)
    : location_(std::move(location)), shared_(sql::IsPostgresUrl(location_)) {}
DutyLock::~DutyLock() = default;
DutyLock::DutyLock(DutyLock&&) noexcept = default;
DutyLock& DutyLock::operator=(DutyLock&&) noexcept = default;

void DutyLock::Release() {
  conn_.reset();
  held_ = false;
}

Result<bool> DutyLock::Hold() {
  if (!shared_) return true;
  const std::string where = sql::RedactUrl(location_);
  if (!conn_) {
    held_ = false;
    // The URL as given, and the client's own probes of the server: a
    // holder cut off from the database learns it within ~15 s as well.
    const char* keys[] = {"dbname",
                          "keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "connect_timeout",
                          "application_name",
                          nullptr};
    const char* values[] = {location_.c_str(),       "1",    "5", "2", "3", "10000", "5",
                            "trainq serve (duties)", nullptr};
    auto c = std::make_unique<Conn>();
    c->conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    if (PQstatus(c->conn) != CONNECTION_OK) {
      return Fail(ErrorKind::kUnavailable,
                  where + ": cannot connect to PostgreSQL: " + Trim(PQerrorMessage(c->conn)));
    }
    // The server's side of the same: the backend of a holder whose host
    // vanished ends within ~15 s, and its lock with it (TCP only; a Unix
    // socket's peer is on the same host and its death is seen at once).
    PGresult* r = PQexec(c->conn,
                         "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
                         "SET tcp_keepalives_count = 3; SET tcp_user_timeout = 10000");
    PQclear(r);
    conn_ = std::move(c);
  }
  const char* sql = held_ ? "SELECT true" : kTryLock;
  PGresult* r = PQexec(conn_->conn, sql);
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
    std::string msg = Trim(PQerrorMessage(conn_->conn));
    PQclear(r);
    const bool was_held = held_;
    Release();
    return Fail(ErrorKind::kUnavailable,
                where + ": " +
                    (was_held ? "the connection holding the duties lock failed: "
                              : "cannot take the duties lock: ") +
                    msg);
  }
  held_ = std::string_view(PQgetvalue(r, 0, 0)) == "t";
  PQclear(r);
  return held_;
}

}  // namespace trainq
