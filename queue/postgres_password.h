// The password of this process's PostgreSQL connections, given apart from
// the URL (serve's server.yaml `database: {url: ..., password: {file: ...}}`;
// docs/deployment.md, "PostgreSQL").
#pragma once

#include <string>

namespace trainq::sql {

// The password every later PostgreSQL connection of this process gives;
// empty: libpq's own (PGPASSFILE, ~/.pgpass, PGPASSWORD). Handed to libpq as
// its own connection parameter, never part of the URL, so no message that
// prints a URL can hold it. Defined in queue/postgres.cc.
void SetPostgresPassword(std::string password);

}  // namespace trainq::sql
