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

}  // namespace trainq::testing
