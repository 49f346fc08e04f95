// server.yaml's `database:` (docs/deployment.md, "PostgreSQL"): the store serve
// uses when neither --db nor TRAINQ_DB names one.
//
//   database: postgres://trainq@db.example:5432/trainq?sslmode=verify-full
//   database:
//     url: postgres://trainq@db.example:5432/trainq?sslmode=verify-full
//     password: {file: /etc/trainq/pg-password}   # or {env: NAME}
//
// A SQLite file works too. A password written in the URL is refused, as for
// every secret in server.yaml; the password is kept apart from the URL, so
// no message that prints the URL can hold it.
#pragma once

#include <optional>
#include <string>

#include "core/result.h"
#include "core/yaml_reader.h"  // SecretValue

namespace YAML {
class Node;
}  // namespace YAML

namespace trainq {

struct DatabaseConfig {
  std::string url;       // a postgres:// URL without a password, or a SQLite file
  SecretValue password;  // empty: libpq's PGPASSFILE / ~/.pgpass
};

// The `database:` value at `n` (`path` for messages), read with `reader`.
Result<DatabaseConfig> ParseDatabaseConfig(const YamlReader& reader, const YAML::Node& n,
                                           const std::string& path);

// `database:` of the server config at `path`: nullopt when it has none.
// ParseServerConfig checks it too, so errors come at load, naming file and line.
Result<std::optional<DatabaseConfig>> LoadDatabaseConfig(const std::string& path);

}  // namespace trainq
