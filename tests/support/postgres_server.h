// The store a test opens: a SQLite file in the test's directory, or with
// TRAINQ_TEST_DB=postgres a PostgreSQL database of its own on a server this
// test process starts (initdb into a temporary directory, as an unprivileged
// user when run as root; a Unix socket in that directory; stopped when the
// process exits, even when it dies). docs/design/postgres.md.
#pragma once

#include <string>

#include "tests/support/temp_dir.h"

namespace trainq::testing {

// True when TRAINQ_TEST_DB=postgres.
bool TestingPostgres();

// `dir/name` (SQLite), or the postgres:// URL of a new, empty database; the
// same (dir, name) gives the same database, so a test can open it again.
std::string StoreLocation(const TempDir& dir, const std::string& name);

// Whether PostgreSQL's programs are installed (TRAINQ_PG_BIN, else Debian's
// postgresql-15): tests of PostgreSQL itself skip, saying so, without them.
bool PostgresInstalled();

// The postgres:// URL of a new, empty database on this process's server
// (started on first use), whatever TRAINQ_TEST_DB says: for the tests of
// PostgreSQL itself (`trainq db copy`).
std::string PostgresLocation(const TempDir& dir, const std::string& name);

// A new, empty database owned by a role that the server asks for its
// password (scram-sha-256, even on its socket): `url` names no password;
// `password` is the role's.
struct PostgresLogin {
  std::string url;
  std::string password;
};
PostgresLogin PostgresPasswordLogin();

}  // namespace trainq::testing
