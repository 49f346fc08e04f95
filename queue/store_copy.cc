#include "queue/store_copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "queue/sqlite.h"
#include "queue/store.h"

namespace trainq {

namespace {

namespace fs = std::filesystem;

// PostgreSQL's own bookkeeping table (queue/schema.cc), not a table of rows
// the store keeps: the target has it already at the version it was made at.
constexpr const char* kPgVersionTable = "trainq_schema_version";

// Table -> its columns in order, as the store made them.
using Tables = std::map<std::string, std::vector<std::string>>;

Result<Tables> ListTables(sql::Db& db) {
  Tables out;
  ASSIGN_OR_RETURN(
      auto st, db.Prepare(db.is_postgres()
                              ? "SELECT table_name, column_name FROM information_schema.columns "
                                "WHERE table_schema = current_schema() "
                                "ORDER BY table_name, ordinal_position"
                              : "SELECT m.name, p.name FROM sqlite_master AS m, "
                                "pragma_table_info(m.name) AS p WHERE m.type = 'table' "
                                "AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                                "ORDER BY m.name, p.cid"));
  for (;;) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    auto table = st.Text(0);
    if (table == kPgVersionTable) continue;
    out[table].push_back(st.Text(1));
  }
  return out;
}

// A table name as an SQL identifier (the store's names are plain words; the
// quotes keep a word PostgreSQL reserves usable).
std::string Quoted(const std::string& name) { return "\"" + name + "\""; }

Result<std::int64_t> CountRows(sql::Db& db, const std::string& table) {
  ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT count(*) FROM " + Quoted(table)));
  ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : 0;
}

// The tables in an order in which every foreign key points at a table
// copied before it (a table's references to itself are checked at the end
// of each INSERT, and a row refers to an earlier one).
Result<std::vector<std::string>> CopyOrder(sql::Db& pg, const Tables& tables) {
  std::map<std::string, std::set<std::string>> needs;
  for (const auto& [t, cols] : tables) needs[t];
  ASSIGN_OR_RETURN(auto st,
                   pg.Prepare("SELECT c.conrelid::regclass::text, c.confrelid::regclass::text "
                              "FROM pg_constraint AS c JOIN pg_namespace AS n "
                              "ON n.oid = c.connamespace WHERE c.contype = 'f' "
                              "AND n.nspname = current_schema()"));
  for (;;) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    auto from = st.Text(0), to = st.Text(1);
    if (from != to && needs.count(from) && needs.count(to)) needs[from].insert(to);
  }
  std::vector<std::string> order;
  std::set<std::string> done;
  while (order.size() < needs.size()) {
    bool progressed = false;
    for (const auto& [t, deps] : needs) {
      if (done.count(t)) continue;
      if (std::all_of(deps.begin(), deps.end(), [&](const auto& d) { return done.count(d) > 0; })) {
        order.push_back(t);
        done.insert(t);
        progressed = true;
      }
    }
    if (!progressed) {
      return Fail(ErrorKind::kInternal,
                  pg.path() + ": the foreign keys between tables form a cycle");
    }
  }
  return order;
}

// One SQLite value as a PostgreSQL literal: NULL, or a quoted string that
// the target column's type parses (INSERT coerces each row's values to its
// columns' types), so a value that does not fit its column is refused, not
// rounded. False for text holding a NUL byte, which PostgreSQL cannot store.
bool AppendLiteral(sqlite3_stmt* st, int col, std::string* out) {
  switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL:
      *out += "NULL";
      return true;
    case SQLITE_INTEGER:
      *out += "'" + std::to_string(sqlite3_column_int64(st, col)) + "'";
      return true;
    case SQLITE_FLOAT: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "'%.17g'", sqlite3_column_double(st, col));
      *out += buf;
      return true;
    }
    default: {
      const auto* p = static_cast<const char*>(sqlite3_column_blob(st, col));
      const int n = sqlite3_column_bytes(st, col);
      *out += '\'';
      for (int i = 0; i < n; ++i) {
        if (p[i] == '\0') return false;
        if (p[i] == '\'') *out += '\'';
        *out += p[i];
      }
      *out += '\'';
      return true;
    }
  }
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Compares the two stores' tables and columns; "" when they match.
std::string SchemaDifference(const Tables& want, const Tables& have, const std::string& have_name) {
  std::vector<std::string> diffs;
  for (const auto& [t, cols] : want) {
    auto it = have.find(t);
    if (it == have.end()) {
      diffs.push_back("table " + t + " missing");
      continue;
    }
    std::set<std::string> got(it->second.begin(), it->second.end());
    for (const auto& c : cols) {
      if (!got.count(c)) diffs.push_back("column " + t + "." + c + " missing");
    }
  }
  for (const auto& [t, cols] : have) {
    if (!want.count(t)) diffs.push_back("table " + t + " not in this trainq's schema");
  }
  if (diffs.empty()) return "";
  if (diffs.size() > 8) {
    diffs.resize(8);
    diffs.push_back("...");
  }
  return have_name + ": " + Join(diffs, "; ");
}

// Copies `table` from the SQLite source into the PostgreSQL target: multi-row
// INSERTs of up to 500 rows (about 1 MB) each, in the caller's transaction.
Status CopyTable(sql::Db& src, sql::Db& dst, const std::string& table,
                 const std::vector<std::string>& target_cols,
                 const std::vector<std::string>& source_cols) {
  // SQLite's metrics rows have only their implicit rowid, which PostgreSQL's
  // table names as a column: read it as such.
  std::set<std::string> have(source_cols.begin(), source_cols.end());
  std::vector<std::string> quoted;
  for (const auto& c : target_cols) {
    if (!have.count(c) && c != "rowid") {
      return Fail(ErrorKind::kInvalidArgument,
                  src.path() + ": table " + table + " has no column " + c + " (schema differs)");
    }
    quoted.push_back(Quoted(c));
  }
  const std::string columns = Join(quoted, ", ");
  sqlite3_stmt* st = nullptr;
  // In the order the rows were written: a row refers only to earlier ones.
  const std::string q = "SELECT " + columns + " FROM " + Quoted(table) + " ORDER BY rowid";
  if (sqlite3_prepare_v2(src.raw(), q.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    return std::unexpected(src.LastError("read " + table));
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> guard(st, sqlite3_finalize);
  const int ncols = static_cast<int>(target_cols.size());
  const std::string head = "INSERT INTO " + Quoted(table) + " (" + columns + ") VALUES ";
  std::string sql = head;
  int rows = 0;
  std::int64_t row_number = 0;
  for (;;) {
    const int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
      return std::unexpected(src.LastError("read " + table));
    if (rc == SQLITE_ROW) {
      ++row_number;
      sql += rows ? ", (" : "(";
      for (int c = 0; c < ncols; ++c) {
        if (c) sql += ", ";
        if (!AppendLiteral(st, c, &sql)) {
          return Fail(ErrorKind::kInvalidArgument,
                      src.path() + ": table " + table + ", row " + std::to_string(row_number) +
                          ", column " + target_cols[c] +
                          ": text with a NUL byte, which PostgreSQL cannot store");
        }
      }
      sql += ")";
      ++rows;
    }
    if (rows > 0 && (rc == SQLITE_DONE || rows == 500 || sql.size() > (1u << 20))) {
      if (auto e = dst.Exec(sql); !e) {
        Error err = e.error();
        if (err.message.size() > 600) err.message = err.message.substr(0, 600) + "...";
        err.message += " (copying table " + table + ")";
        return std::unexpected(err);
      }
      sql = head;
      rows = 0;
    }
    if (rc == SQLITE_DONE) return {};
  }
}

// Moves every identity sequence of the target past the largest id copied, so
// the next row the store inserts does not collide with a copied one.
Status AdvanceSequences(sql::Db& pg) {
  ASSIGN_OR_RETURN(auto st,
                   pg.Prepare("SELECT table_name, column_name FROM information_schema.columns "
                              "WHERE table_schema = current_schema() "
                              "AND is_identity = 'YES'"));
  std::vector<std::pair<std::string, std::string>> ids;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    ids.emplace_back(st.Text(0), st.Text(1));
  }
  for (const auto& [table, col] : ids) {
    TRY(pg.Exec("SELECT setval(pg_get_serial_sequence('" + Quoted(table) + "', '" + col +
                "'), coalesce((SELECT max(" + Quoted(col) + ") FROM " + Quoted(table) +
                "), 0) + 1, false)"));
  }
  return {};
}

}  // namespace

Result<StoreCopyReport> CopyStore(const std::string& from, const std::string& to) {
  if (sql::IsPostgresUrl(from)) {
    return Fail(ErrorKind::kInvalidArgument,
                "--from " + sql::RedactUrl(from) +
                    ": copies go from a SQLite store to PostgreSQL (for one PostgreSQL database "
                    "to another: pg_dump and pg_restore)");
  }
  if (!sql::IsPostgresUrl(to)) {
    return Fail(ErrorKind::kInvalidArgument,
                "--to " + to +
                    ": expected a postgres:// URL (a SQLite store is copied whole by SQLite's "
                    "online backup: sqlite3 " +
                    from + " \".backup " + to + "\")");
  }
  std::error_code ec;
  if (!fs::exists(from, ec)) {
    return Fail(ErrorKind::kNotFound, from + ": no such store (--from)");
  }
  // Both at this trainq's schema: the source migrated as any command would,
  // the target's schema written into its empty database (or already there).
  int version = 0;
  {
    ASSIGN_OR_RETURN(auto s, Store::Open(from, {.create = false}));
    ASSIGN_OR_RETURN(auto t, Store::Open(to));
    version = s.schema_version();
    if (t.schema_version() != version) {
      return Fail(ErrorKind::kInvalidArgument, sql::RedactUrl(to) + ": schema version " +
                                                   std::to_string(t.schema_version()) +
                                                   ", the source's is " + std::to_string(version));
    }
  }
  ASSIGN_OR_RETURN(auto src, sql::Db::Open(from, false, 5000));
  ASSIGN_OR_RETURN(auto dst, sql::Db::Open(to, false, 5000));
  // One consistent view of the source (a serve still writing it would
  // change the counts between the copy and the check: stop it first).
  TRY(src.Exec("BEGIN"));
  ASSIGN_OR_RETURN(auto source_tables, ListTables(src));
  ASSIGN_OR_RETURN(auto target_tables, ListTables(dst));
  if (auto d = SchemaDifference(source_tables, target_tables, dst.path()); !d.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "the two schemas differ: " + d);
  }
  for (const auto& [t, cols] : target_tables) {
    if (!source_tables.count(t)) {
      return Fail(ErrorKind::kInvalidArgument,
                  "the two schemas differ: " + from + ": table " + t + " missing");
    }
  }
  ASSIGN_OR_RETURN(auto order, CopyOrder(dst, target_tables));

  StoreCopyReport report;
  report.schema_version = version;
  TRY(dst.BeginWrite());
  // The literals are plain SQL strings: a backslash is a backslash.
  if (auto st = dst.Exec("SET LOCAL standard_conforming_strings = on"); !st) {
    (void)dst.Exec("ROLLBACK");
    return std::unexpected(st.error());
  }
  auto copy = [&]() -> Status {
    for (const auto& t : order) {
      ASSIGN_OR_RETURN(auto n, CountRows(dst, t));
      if (n > 0) {
        return Fail(ErrorKind::kInvalidArgument,
                    dst.path() + " is not empty (table " + t + " holds " + std::to_string(n) +
                        " rows): db copy writes only into a new database, so that nothing "
                        "there is mixed with or lost under the copy");
      }
    }
    // The counting triggers keep counts up to date as rows change; the
    // copied counts are already the source's.
    for (const auto& t : order) TRY(dst.Exec("ALTER TABLE " + Quoted(t) + " DISABLE TRIGGER USER"));
    for (const auto& t : order) {
      TRY(CopyTable(src, dst, t, target_tables.at(t), source_tables.at(t)));
    }
    for (const auto& t : order) TRY(dst.Exec("ALTER TABLE " + Quoted(t) + " ENABLE TRIGGER USER"));
    TRY(AdvanceSequences(dst));
    std::vector<std::string> mismatches;
    for (const auto& t : order) {
      ASSIGN_OR_RETURN(auto want, CountRows(src, t));
      ASSIGN_OR_RETURN(auto got, CountRows(dst, t));
      if (want != got) {
        mismatches.push_back(t + ": " + std::to_string(want) + " in the source, " +
                             std::to_string(got) + " copied");
      }
      report.tables.push_back({t, got});
    }
    if (!mismatches.empty()) {
      return Fail(ErrorKind::kInternal, "row counts differ after the copy (" +
                                            Join(mismatches, "; ") + "): nothing was kept");
    }
    return {};
  };
  if (auto st = copy(); !st) {
    (void)dst.Exec("ROLLBACK");
    (void)src.Exec("ROLLBACK");
    return std::unexpected(st.error());
  }
  TRY(dst.Exec("COMMIT"));
  (void)src.Exec("ROLLBACK");
  return report;
}

Result<StoreCheckReport> CheckStore(const std::string& location) {
  StoreCheckReport r;
  r.postgres = sql::IsPostgresUrl(location);
  r.location = sql::RedactUrl(location);
  std::error_code ec;
  if (!r.postgres && !fs::exists(location, ec)) {
    return Fail(ErrorKind::kNotFound, location + ": no such store");
  }
  ASSIGN_OR_RETURN(auto store, Store::Open(location, {.create = false}));
  r.schema_version = store.schema_version();
  if (r.postgres) {
    r.integrity = "not checked by trainq (PostgreSQL checks its own pages)";
  } else {
    ASSIGN_OR_RETURN(auto lines, store.QuickCheck());
    r.integrity = Join(lines, "; ");
    if (r.integrity != "ok") r.problems.push_back("quick_check: " + r.integrity);
  }
  // This trainq's schema, as a new SQLite store has it.
  std::string tmpl = (fs::temp_directory_path() / "trainq-check-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return Fail(ErrorKind::kIo, "cannot make a temporary directory");
  Tables want;
  {
    auto fresh = Store::Open(tmpl + "/schema.db");
    if (fresh) {
      auto db = sql::Db::Open(tmpl + "/schema.db", false, 5000);
      if (db) {
        auto t = ListTables(*db);
        if (t) want = std::move(*t);
      }
    }
  }
  fs::remove_all(tmpl, ec);
  ASSIGN_OR_RETURN(auto db, sql::Db::Open(location, false, 5000));
  ASSIGN_OR_RETURN(auto have, ListTables(db));
  if (want.empty()) {
    r.problems.push_back("could not make this trainq's schema to compare with");
  } else if (auto d = SchemaDifference(want, have, r.location); !d.empty()) {
    r.problems.push_back(d);
  }
  for (const auto& [t, cols] : have) {
    ASSIGN_OR_RETURN(auto n, CountRows(db, t));
    r.tables.push_back({t, n});
  }
  return r;
}

}  // namespace trainq
