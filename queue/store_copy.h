// Moving a store whole and checking one (`trainq db copy`, `trainq db check`;
// docs/deployment.md, "Moving to PostgreSQL"): a SQLite store copied into an
// empty PostgreSQL database, every table with its ids, and each table's rows
// counted on both sides; a check that answers for either store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace trainq {

struct TableRows {
  std::string table;
  std::int64_t rows = 0;
};

struct StoreCopyReport {
  int schema_version = 0;
  std::vector<TableRows> tables;  // in the order they were copied
  std::int64_t total_rows() const {
    std::int64_t n = 0;
    for (const auto& t : tables) n += t.rows;
    return n;
  }
};

// Copies the SQLite store `from` (brought to this trainq's schema first, as
// any command that opens it does) into the PostgreSQL database `to`, which
// must be empty or hold only an empty trainq schema. One transaction on the
// target: every row of every table with its ids (batched INSERTs, the
// counting triggers off while the counts are copied as they are), identity
// sequences moved past the largest id copied, then each table's rows counted
// on both sides. Any difference, a table or column one side lacks, a row the
// target refuses, or a target that holds rows fails the whole copy and
// leaves the target as it was. Errors name the target without its password.
Result<StoreCopyReport> CopyStore(const std::string& from, const std::string& to);

struct StoreCheckReport {
  std::string location;  // file, or URL without its password
  bool postgres = false;
  int schema_version = 0;
  std::string integrity;  // SQLite: PRAGMA quick_check's "ok" or problems
  std::vector<TableRows> tables;
  std::vector<std::string> problems;  // empty: healthy
  bool ok() const { return problems.empty(); }
};

// Opens the store read-only in intent (a SQLite store is brought to this
// trainq's schema, as every command does) and checks: it is reachable, its
// schema version is this trainq's, it has every table and column of that
// schema (compared with a new SQLite store made in a temporary file), and
// on SQLite PRAGMA quick_check. Counts each table's rows.
Result<StoreCheckReport> CheckStore(const std::string& location);

}  // namespace trainq
