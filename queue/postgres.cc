// sql::Db and sql::Stmt on PostgreSQL through libpq (queue/postgres.h,
// docs/design/postgres.md): connecting, translating the store's SQL once per
// statement text, prepared statements kept per connection, values as text.
#include "queue/postgres.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <optional>

#include "queue/postgres_password.h"
#include "queue/sqlite.h"

namespace trainq::sql {

namespace {

// Write transactions hold this transaction-scoped advisory lock (the bytes of
// "trainq"): writers to one database take turns, as SQLite's BEGIN IMMEDIATE
// makes them, which is what every part of the store was written against.
constexpr const char* kUndoStatement =
    "ROLLBACK TO SAVEPOINT trainq_stmt; RELEASE SAVEPOINT trainq_stmt";

constexpr const char* kBeginWrite = "BEGIN; SELECT pg_advisory_xact_lock(127978248433265)";

bool IdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string Upper(std::string_view s) {
  std::string u(s);
  for (auto& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// Index past a quoted literal or name starting at `i` (quote doubled to escape).
size_t SkipQuoted(std::string_view s, size_t i) {
  char q = s[i++];
  while (i < s.size()) {
    if (s[i] == q) {
      if (i + 1 < s.size() && s[i + 1] == q) {
        i += 2;
        continue;
      }
      return i + 1;
    }
    ++i;
  }
  return i;
}

// Index of the next token at or after `i`: past spaces and comments.
size_t NextToken(std::string_view s, size_t i) {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.substr(i, 2) == "--") {
      auto e = s.find('\n', i);
      i = e == std::string_view::npos ? s.size() : e + 1;
    } else if (s.substr(i, 2) == "/*") {
      auto e = s.find("*/", i + 2);
      i = e == std::string_view::npos ? s.size() : e + 2;
    } else {
      break;
    }
  }
  return i;
}

std::string_view WordAt(std::string_view s, size_t i) {
  if (i >= s.size() || !IdentStart(s[i])) return {};
  size_t k = i;
  while (k < s.size() && IdentChar(s[k])) ++k;
  return s.substr(i, k - i);
}

// Arguments of the call whose '(' is at `open`, counted at its top level.
int CountArgs(std::string_view s, size_t open) {
  int depth = 0, args = 1;
  for (size_t i = open; i < s.size();) {
    char c = s[i];
    if (c == '\'' || c == '"') {
      i = SkipQuoted(s, i);
      continue;
    }
    if (c == '(') ++depth;
    if (c == ')' && --depth == 0) return args;
    if (c == ',' && depth == 1) ++args;
    ++i;
  }
  return args;
}

bool IsKeywordAfterIs(std::string_view w) {
  auto u = Upper(w);
  return u == "NULL" || u == "TRUE" || u == "FALSE" || u == "DISTINCT" || u == "UNKNOWN";
}

ErrorKind KindForState(const char* state) {
  std::string_view s = state ? state : "";
  if (s.starts_with("23")) return ErrorKind::kConflict;
  if (s == "40001" || s == "40P01" || s == "55P03" || s == "57014" || s.starts_with("08") ||
      s.starts_with("53") || s.starts_with("57P")) {
    return ErrorKind::kUnavailable;
  }
  if (s.starts_with("58")) return ErrorKind::kIo;
  if (s == "XX001" || s == "XX002") return ErrorKind::kCorruption;
  return ErrorKind::kInternal;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Error ResultError(const PgConn& c, PGresult* r, std::string_view what) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string msg = r ? PQresultErrorMessage(r) : "";
  if (msg.empty()) msg = PQerrorMessage(c.conn);
  std::string out = c.location + ": ";
  if (!what.empty()) out += std::string(what) + ": ";
  out += Trim(msg);
  if (state && std::string_view(state) == "55P03") {
    out += " (another trainq process held the write lock past the busy timeout)";
  }
  return Error{KindForState(state), out};
}

// Runs `sql` (no parameters) and returns its last result, or the error.
Result<std::string> ExecText(PgConn& c, const char* sql) {
  PGresult* r = PQexec(c.conn, sql);
  auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    Error e = ResultError(c, r, "");
    PQclear(r);
    return std::unexpected(e);
  }
  std::string v = (st == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
                      ? PQgetvalue(r, 0, 0)
                      : "";
  PQclear(r);
  return v;
}

void IgnoreNotice(void*, const char*) {}

bool IsWord(std::string_view w, std::initializer_list<const char*> words) {
  auto u = Upper(w);
  for (const char* x : words) {
    if (u == x) return true;
  }
  return false;
}

// Index of the ')' matching the '(' at `open` (or the end).
size_t MatchingParen(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size();) {
    char c = s[i];
    if (c == '\'' || c == '"') {
      i = SkipQuoted(s, i);
      continue;
    }
    if (c == '(') ++depth;
    if (c == ')' && --depth == 0) return i;
    ++i;
  }
  return s.size();
}

// PostgreSQL 15 wants a name for every subquery in FROM or JOIN, which
// SQLite does not: `FROM (SELECT ...)` gains ` AS trainq_subN`.
std::string NameSubqueries(std::string_view s) {
  std::string out;
  std::vector<size_t> after;  // positions just past a nameless subquery's ')'
  std::string_view last_word;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '\'' || c == '"') {
      i = SkipQuoted(s, i);
      last_word = {};
    } else if (IdentStart(c)) {
      last_word = WordAt(s, i);
      i += last_word.size();
    } else if (c == '(') {
      if (IsWord(last_word, {"FROM", "JOIN"}) &&
          IsWord(WordAt(s, NextToken(s, i + 1)), {"SELECT", "WITH", "VALUES"})) {
        size_t close = MatchingParen(s, i);
        std::string_view next = WordAt(s, NextToken(s, close + 1));
        if (next.empty() ||
            IsWord(next, {"WHERE", "ORDER", "GROUP", "LIMIT", "UNION", "EXCEPT", "INTERSECT",
                          "JOIN", "LEFT", "INNER", "CROSS", "ON", "HAVING", "OFFSET"})) {
          after.push_back(close + 1);
        }
      }
      last_word = {};
      ++i;
    } else {
      if (!std::isspace(static_cast<unsigned char>(c))) last_word = {};
      ++i;
    }
  }
  if (after.empty()) return std::string(s);
  std::sort(after.begin(), after.end());
  size_t from = 0;
  int k = 0;
  for (size_t pos : after) {
    out.append(s.substr(from, pos - from));
    out += " AS trainq_sub" + std::to_string(++k);
    from = pos;
  }
  out.append(s.substr(from));
  return out;
}

// True when an operator that came next in `out` would be unary: after
// WHERE, AND, OR, ON, NOT, '(' or ','.
bool UnaryPosition(const std::string& out) {
  size_t k = out.size();
  while (k > 0 && std::isspace(static_cast<unsigned char>(out[k - 1]))) --k;
  if (k == 0) return false;
  if (out[k - 1] == '(' || out[k - 1] == ',') return true;
  size_t b = k;
  while (b > 0 && IdentChar(out[b - 1])) --b;
  return IsWord(std::string_view(out).substr(b, k - b), {"WHERE", "AND", "OR", "ON", "NOT"});
}

}  // namespace

bool IsPostgresUrl(std::string_view location) {
  return location.starts_with("postgres://") || location.starts_with("postgresql://");
}

std::string RedactUrl(std::string_view location) {
  std::string s(location);
  if (!IsPostgresUrl(s)) return s;
  // postgres://user:password@host -> postgres://user:***@host
  auto scheme = s.find("://") + 3;
  auto at = s.find('@', scheme);
  auto slash = s.find('/', scheme);
  if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
    auto colon = s.find(':', scheme);
    if (colon != std::string::npos && colon < at) s.replace(colon + 1, at - colon - 1, "***");
  }
  // ...?password=secret&x -> ...?password=***&x
  for (size_t p = s.find("password="); p != std::string::npos;
       p = s.find("password=", p + 1)) {
    if (p > 0 && s[p - 1] != '?' && s[p - 1] != '&') continue;
    auto v = p + 9;
    auto e = s.find('&', v);
    s.replace(v, (e == std::string::npos ? s.size() : e) - v, "***");
  }
  return s;
}

std::string TranslateForPostgres(std::string_view sql, int* params, std::vector<bool>* used) {
  const std::string named = NameSubqueries(sql);
  std::string_view s = named;
  std::string out;
  out.reserve(s.size() + 32);
  int max_index = 0;
  std::vector<int> seen;
  bool or_ignore = false;
  size_t i = 0;
  const size_t n = s.size();
  auto prev_is_dot = [&] {
    size_t k = out.size();
    while (k > 0 && std::isspace(static_cast<unsigned char>(out[k - 1]))) --k;
    return k > 0 && out[k - 1] == '.';
  };
  while (i < n) {
    char c = s[i];
    if (c == '\'' || c == '"') {
      size_t e = SkipQuoted(s, i);
      out.append(s.substr(i, e - i));
      i = e;
    } else if (s.substr(i, 2) == "--" || s.substr(i, 2) == "/*") {
      size_t e = NextToken(s, i);
      out.append(s.substr(i, e - i));
      i = e;
    } else if (c == '?') {
      size_t j = i + 1;
      while (j < n && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      int index = j > i + 1 ? std::atoi(std::string(s.substr(i + 1, j - i - 1)).c_str())
                            : max_index + 1;
      if (index > max_index) max_index = index;
      seen.push_back(index);
      out += '$';
      out += std::to_string(index);
      i = j;
    } else if (c == '+' && i + 1 < n && IdentStart(s[i + 1]) && UnaryPosition(out)) {
      ++i;  // SQLite's unary + that keeps a column from using an index
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < n && (IdentChar(s[j]) || s[j] == '.')) ++j;
      out.append(s.substr(i, j - i));
      i = j;
    } else if (IdentStart(c)) {
      std::string_view word = WordAt(s, i);
      size_t k = i + word.size();
      std::string u = Upper(word);
      size_t t = NextToken(s, k);
      std::string_view next = WordAt(s, t);
      if (prev_is_dot()) {
        out.append(word);
      } else if (u == "INSERT" && Upper(next) == "OR" &&
                 Upper(WordAt(s, NextToken(s, t + 2))) == "IGNORE") {
        out += "INSERT";
        size_t ig = NextToken(s, t + 2);
        i = ig + 6;
        or_ignore = true;
        continue;
      } else if ((u == "MAX" || u == "MIN") && t < n && s[t] == '(' && CountArgs(s, t) >= 2) {
        out += u == "MAX" ? "GREATEST" : "LEAST";
      } else if (u == "RANDOM" && t < n && s[t] == '(' && NextToken(s, t + 1) < n &&
                 s[NextToken(s, t + 1)] == ')') {
        out += "trainq_random";
      } else if (u == "LAST_INSERT_ROWID") {
        out += "trainq_lastval";
      } else if (u == "INDEXED" && Upper(next) == "BY") {
        // SQLite's index hint: PostgreSQL's planner chooses alone.
        size_t t2 = NextToken(s, t + 2);
        i = t2 + WordAt(s, t2).size();
        continue;
      } else if (u == "LIKE") {
        out += "ILIKE";
      } else if (u == "IS" && Upper(next) == "NOT") {
        size_t t2 = NextToken(s, t + 3);
        if (IsKeywordAfterIs(WordAt(s, t2))) {
          out.append(s.substr(i, t + 3 - i));
        } else {
          out += "IS DISTINCT FROM";
        }
        i = t + 3;
        continue;
      } else if (u == "IS") {
        out += IsKeywordAfterIs(next) ? std::string(word) : "IS NOT DISTINCT FROM";
      } else if (u == "AS" && Upper(next) == "INTEGER") {
        out += "AS BIGINT";
        i = t + next.size();
        continue;
      } else if (u == "AS" && Upper(next) == "REAL") {
        out += "AS DOUBLE PRECISION";
        i = t + next.size();
        continue;
      } else {
        out.append(word);
      }
      i = k;
    } else {
      out += c;
      ++i;
    }
  }
  if (or_ignore) {
    while (!out.empty() && (std::isspace(static_cast<unsigned char>(out.back())) ||
                            out.back() == ';')) {
      out.pop_back();
    }
    out += " ON CONFLICT DO NOTHING";
  }
  if (params) *params = max_index;
  if (used) {
    used->assign(static_cast<size_t>(max_index), false);
    for (int k : seen) (*used)[static_cast<size_t>(k - 1)] = true;
  }
  return out;
}

PgConn::~PgConn() {
  if (conn) PQfinish(conn);
}

PgStmt::~PgStmt() { Clear(); }

void PgStmt::Clear() {
  if (result) PQclear(result);
  result = nullptr;
  row = -1;
}

void PgBind(PgStmt& s, int i, std::string value) {
  if (i < 1 || i > static_cast<int>(s.values.size())) return;
  s.values[i - 1] = std::move(value);
  s.null[i - 1] = false;
}

void PgBindNull(PgStmt& s, int i) {
  if (i < 1 || i > static_cast<int>(s.values.size())) return;
  s.null[i - 1] = true;
}

Result<bool> PgStep(PgStmt& s) {
  if (s.result) {
    ++s.row;
    return s.row < PQntuples(s.result);
  }
  PgConn& c = *s.conn;
  std::vector<const char*> values(s.values.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = s.null[i] ? nullptr : s.values[i].c_str();
  // Inside a transaction a failed statement would abort the whole of it on
  // PostgreSQL (SQLite fails the statement alone, and callers go on after a
  // conflict): a savepoint keeps SQLite's behaviour.
  const bool guard = PQtransactionStatus(c.conn) == PQTRANS_INTRANS;
  if (guard) TRY(ExecText(c, "SAVEPOINT trainq_stmt"));
  PGresult* r = PQexecPrepared(c.conn, s.prepared.name.c_str(), static_cast<int>(values.size()),
                               values.data(), nullptr, nullptr, 0);
  auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    Error e = ResultError(c, r, "");
    PQclear(r);
    if (guard) (void)ExecText(c, kUndoStatement);
    return std::unexpected(e);
  }
  if (guard) TRY(ExecText(c, "RELEASE SAVEPOINT trainq_stmt"));
  std::string_view cmd = PQcmdStatus(r);
  if (cmd.starts_with("INSERT") || cmd.starts_with("UPDATE") || cmd.starts_with("DELETE")) {
    c.changes = std::atoi(PQcmdTuples(r));
  }
  s.result = r;
  s.row = 0;
  return PQntuples(r) > 0;
}

const char* PgValue(const PgStmt& s, int col) {
  if (!s.result || s.row < 0 || s.row >= PQntuples(s.result) || col < 0 ||
      col >= PQnfields(s.result) || PQgetisnull(s.result, s.row, col)) {
    return nullptr;
  }
  return PQgetvalue(s.result, s.row, col);
}

void PgStmtDeleter::operator()(PgStmt* s) const { delete s; }

Stmt::Stmt(PgStmtPtr pg) : pg_(std::move(pg)) {}

std::int64_t Stmt::PgInt(int col) const {
  const char* v = PgValue(*pg_, col);
  if (!v) return 0;
  if (v[0] == 't' && v[1] == 0) return 1;  // a boolean read as an integer
  if (v[0] == 'f' && v[1] == 0) return 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end && (*end == '.' || *end == 'e' || *end == 'E')) {
    return static_cast<std::int64_t>(std::strtod(v, nullptr));
  }
  return x;
}

double Stmt::PgDouble(int col) const {
  const char* v = PgValue(*pg_, col);
  if (!v) return 0;
  if (v[0] == 't' && v[1] == 0) return 1;
  return std::strtod(v, nullptr);
}

bool Stmt::PgIsNull(int col) const { return PgValue(*pg_, col) == nullptr; }

namespace {

std::mutex& PasswordMutex() {
  static std::mutex mu;
  return mu;
}
std::string& Password() {
  static std::string password;
  return password;
}

}  // namespace

void SetPostgresPassword(std::string password) {
  std::lock_guard lock(PasswordMutex());
  Password() = std::move(password);
}

Result<Db> Db::OpenPostgres(const std::string& url) {
  Db db;
  db.path_ = RedactUrl(url);
  db.pg_ = std::unique_ptr<PgConn, void (*)(PgConn*)>(new PgConn, [](PgConn* p) { delete p; });
  db.pg_->location = db.path_;
  std::string password;
  {
    std::lock_guard lock(PasswordMutex());
    password = Password();
  }
  if (password.empty()) {
    db.pg_->conn = PQconnectdb(url.c_str());
  } else {
    // The URL expands in place of dbname; the password after it wins over
    // PGPASSFILE and never becomes part of a string that is printed.
    const char* keys[] = {"dbname", "password", nullptr};
    const char* values[] = {url.c_str(), password.c_str(), nullptr};
    db.pg_->conn = PQconnectdbParams(keys, values, 1);
  }
  if (PQstatus(db.pg_->conn) != CONNECTION_OK) {
    return Fail(ErrorKind::kUnavailable,
                db.path_ + ": cannot connect to PostgreSQL: " + Trim(PQerrorMessage(db.pg_->conn)));
  }
  PQsetNoticeProcessor(db.pg_->conn, IgnoreNotice, nullptr);
  return db;
}

Result<Stmt> Db::PreparePostgres(std::string_view sql) {
  PgConn& c = *pg_;
  std::string key(sql);
  auto it = c.prepared.find(key);
  if (it == c.prepared.end()) {
    PgPrepared p;
    std::vector<bool> used;
    std::string text = TranslateForPostgres(sql, &p.params, &used);
    // A parameter the text never names (SQLite allows ?2 without ?1) has no
    // type to infer: text, which nothing reads.
    std::vector<Oid> types(used.size(), 0);
    for (size_t k = 0; k < used.size(); ++k) {
      if (!used[k]) types[k] = 25;  // TEXTOID
    }
    p.name = "trainq_" + std::to_string(c.prepared.size() + 1);
    // Preparing is not a statement that fails alone inside a transaction.
    const bool guard = PQtransactionStatus(c.conn) == PQTRANS_INTRANS;
    if (guard) TRY(ExecText(c, "SAVEPOINT trainq_stmt"));
    PGresult* r = PQprepare(c.conn, p.name.c_str(), text.c_str(), static_cast<int>(types.size()),
                             types.data());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      Error e = ResultError(c, r, "prepare");
      e.message += " (in: " + text + ")";
      PQclear(r);
      if (guard) (void)ExecText(c, kUndoStatement);
      return std::unexpected(e);
    }
    PQclear(r);
    if (guard) TRY(ExecText(c, "RELEASE SAVEPOINT trainq_stmt"));
    it = c.prepared.emplace(std::move(key), std::move(p)).first;
  }
  PgStmtPtr s(new PgStmt);
  s->conn = &c;
  s->prepared = it->second;
  s->values.resize(static_cast<size_t>(s->prepared.params));
  s->null.assign(static_cast<size_t>(s->prepared.params), true);
  return Stmt(std::move(s));
}

Status Db::ExecPostgres(std::string_view sql) {
  std::string s(sql);
  auto r = ExecText(*pg_, s.c_str());
  if (!r) return std::unexpected(r.error());
  return {};
}

bool Db::InTransaction() const {
  if (pg_) return PQtransactionStatus(pg_->conn) != PQTRANS_IDLE;
  return db_ && sqlite3_get_autocommit(db_) == 0;
}

Status Db::BeginWrite() {
  if (!pg_) return Exec("BEGIN IMMEDIATE");
  auto st = Exec(kBeginWrite);
  // A lock wait that timed out leaves the transaction begun and failed;
  // SQLite's refused BEGIN IMMEDIATE leaves none.
  if (!st && InTransaction()) (void)Exec("ROLLBACK");
  return st;
}

std::int64_t Db::LastInsertId() const {
  if (!pg_) return sqlite3_last_insert_rowid(db_);
  auto v = ExecText(*pg_, "SELECT trainq_lastval()");
  return v ? std::strtoll(v->c_str(), nullptr, 10) : 0;
}

Result<std::int64_t> Db::DataVersion() {
  ASSIGN_OR_RETURN(auto st, Prepare(pg_ ? "SELECT pg_current_wal_lsn() - '0/0'"
                                        : "PRAGMA data_version"));
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Fail(ErrorKind::kInternal, path_ + ": no data version");
  return st.Int(0);
}

int Db::Changes() const { return pg_ ? pg_->changes : sqlite3_changes(db_); }

}  // namespace trainq::sql
