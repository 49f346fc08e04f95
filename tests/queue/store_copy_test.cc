// `trainq db copy` and `trainq db check` below the command (queue/store_copy.h):
// a SQLite store moved whole to a real PostgreSQL server started by the test,
// and the check on both stores.
#include "queue/store_copy.h"

#include <catch2/catch.hpp>
#include <string>

#include "queue/postgres_password.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

BatchSpec Spec(const std::string& experiment, int repeats) {
  BatchSpec spec;
  spec.experiment = experiment;
  spec.command = "printf 'tab\\there\\nback\\\\slash'";  // COPY's escapes, kept
  spec.repeats = repeats;
  spec.timeout_s = 60;
  spec.max_attempts = 2;
  return spec;
}

CommitInfo Commit(char c) {
  CommitInfo commit;
  commit.sha = std::string(40, c);
  commit.message = "a subject with 'quotes', a tab\tand é";
  return commit;
}

// A store with batches, runs in several states, metric points (SQLite's
// implicit rowid) and the counts the triggers keep.
void Fill(Store& store) {
  REQUIRE(store.runs().Submit("/repos/demo", Commit('a'), {Spec("mlp", 3)}, 1000));
  REQUIRE(store.runs().Submit("/repos/demo", Commit('b'), {Spec("mlp", 2), Spec("cnn", 2)}, 2000));
  auto leased = store.runs().Lease("w1", 3000, 60'000, 3).value();
  REQUIRE(leased.size() == 3);
  REQUIRE(store.runs().MarkRunning(leased[0].run_id, leased[0].token, 3100, ""));
  REQUIRE(store.runs().AddMetrics(
      leased[0].run_id, leased[0].token,
      {{"loss", 0.5, 1, false}, {"accuracy", 0.875, std::nullopt, true}}, 3200));
  REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, 3300, 0.875));
  REQUIRE(store.runs().FailRun(leased[1].run_id, leased[1].token, 3400, "boom", 1, false));
}

std::int64_t Count(const std::string& where, const std::string& sql) {
  auto db = sql::Db::Open(where, false, 1000).value();
  auto st = db.Prepare(sql).value();
  REQUIRE(st.Step().value());
  return st.Int(0);
}

TEST_CASE("db copy moves a SQLite store whole to PostgreSQL, ids and counts kept", "[postgres]") {
  if (!testing::PostgresInstalled()) {
    WARN("PostgreSQL 15 is not installed (ci/install-deps installs postgresql-15)");
    return;
  }
  testing::TempDir dir;
  const std::string lite = (dir.path() / "q.db").string();
  {
    auto store = Store::Open(lite).value();
    Fill(store);
  }
  const std::string pg = testing::PostgresLocation(dir, "copy");
  auto report = CopyStore(lite, pg);
  REQUIRE(report);
  CHECK(report->schema_version == Store::kSchemaVersion);
  CHECK(report->total_rows() > 10);

  // The same batches, with the same ids, counts and values, on both stores.
  auto a = Store::Open(lite).value();
  auto b = Store::Open(pg).value();
  auto before = a.runs().Batches(false, 100).value();
  auto after = b.runs().Batches(false, 100).value();
  REQUIRE(before.size() == 3);
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].id == before[i].id);
    CHECK(after[i].sha == before[i].sha);
    CHECK(after[i].subject == before[i].subject);
    CHECK(after[i].counts == before[i].counts);
    CHECK(after[i].values == before[i].values);
  }
  for (const char* q : {"SELECT count(*) FROM metrics", "SELECT max(rowid) FROM metrics",
                        "SELECT max(id) FROM runs", "SELECT sum(length(command)) FROM batches"}) {
    CHECK(Count(pg, q) == Count(lite, q));
  }

  // Identity sequences moved past the copied ids: the next batch and run
  // get new ids, not a copied one's.
  const auto max_run = Count(pg, "SELECT max(id) FROM runs");
  auto added = b.runs().Submit("/repos/demo", Commit('c'), {Spec("mlp", 1)}, 5000);
  REQUIRE(added);
  CHECK(added->at(0).batch_id > before.front().id);
  CHECK(Count(pg, "SELECT max(id) FROM runs") == max_run + 1);
  // The counting triggers are back on after the copy.
  auto leased = b.runs().Lease("w2", 6000, 60'000, 10).value();
  CHECK(leased.size() == 5);  // the 4 copied queued runs and the new one
  auto check = CheckStore(pg);
  REQUIRE(check);
  CHECK(check->ok());
  CHECK(check->postgres);

  // A second copy into the same, now non-empty, database is refused and
  // changes nothing.
  const auto runs_before = Count(pg, "SELECT count(*) FROM runs");
  auto again = CopyStore(lite, pg);
  REQUIRE_FALSE(again);
  CHECK(again.error().message.find("is not empty") != std::string::npos);
  CHECK(Count(pg, "SELECT count(*) FROM runs") == runs_before);
}

TEST_CASE("db copy refuses the wrong direction and another program's database", "[postgres]") {
  if (!testing::PostgresInstalled()) {
    WARN("PostgreSQL 15 is not installed (ci/install-deps installs postgresql-15)");
    return;
  }
  testing::TempDir dir;
  const std::string lite = (dir.path() / "q.db").string();
  REQUIRE(Store::Open(lite));
  auto to_file = CopyStore(lite, (dir.path() / "other.db").string());
  REQUIRE_FALSE(to_file);
  CHECK(to_file.error().message.find(".backup") != std::string::npos);
  auto missing = CopyStore((dir.path() / "none.db").string(), testing::PostgresLocation(dir, "x"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("no such store") != std::string::npos);

  // A value SQLite kept but PostgreSQL's column cannot hold fails the whole
  // copy, naming the table; nothing is left in the target.
  const std::string odd = (dir.path() / "odd.db").string();
  {
    auto store = Store::Open(odd).value();
    Fill(store);
    auto db = sql::Db::Open(odd, false, 1000).value();
    REQUIRE(db.Exec("UPDATE batches SET gpus = 'two' WHERE id = 2"));
  }
  const std::string target = testing::PostgresLocation(dir, "target");
  auto refused = CopyStore(odd, target);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("copying table batches") != std::string::npos);
  CHECK(refused.error().message.find("two") != std::string::npos);
  CHECK(Count(target, "SELECT count(*) FROM runs") == 0);
  CHECK(Count(target, "SELECT count(*) FROM batches") == 0);

  const std::string other = testing::PostgresLocation(dir, "other");
  {
    auto db = sql::Db::Open(other, false, 1000).value();
    REQUIRE(db.Exec("CREATE TABLE accounts (id BIGINT)"));
  }
  auto foreign = CopyStore(lite, other);
  REQUIRE_FALSE(foreign);
  CHECK(foreign.error().message.find("not a trainq database") != std::string::npos);
}

TEST_CASE("db check answers for a SQLite store and a PostgreSQL one", "[postgres]") {
  testing::TempDir dir;
  const std::string lite = (dir.path() / "q.db").string();
  {
    auto store = Store::Open(lite).value();
    Fill(store);
  }
  auto r = CheckStore(lite);
  REQUIRE(r);
  CHECK(r->ok());
  CHECK_FALSE(r->postgres);
  CHECK(r->integrity == "ok");
  CHECK(r->schema_version == Store::kSchemaVersion);
  bool saw_runs = false;
  for (const auto& t : r->tables) {
    if (t.table == "runs") {
      saw_runs = true;
      CHECK(t.rows == 7);
    }
  }
  CHECK(saw_runs);
  // A table gone is named.
  {
    auto db = sql::Db::Open(lite, false, 1000).value();
    REQUIRE(db.Exec("DROP TABLE metrics"));
  }
  auto broken = CheckStore(lite);
  REQUIRE(broken);
  CHECK_FALSE(broken->ok());
  REQUIRE(broken->problems.size() == 1);
  CHECK(broken->problems[0].find("table metrics missing") != std::string::npos);

  if (!testing::PostgresInstalled()) return;
  const std::string pg = testing::PostgresLocation(dir, "check");
  REQUIRE(Store::Open(pg));
  auto p = CheckStore(pg);
  REQUIRE(p);
  CHECK(p->ok());
  CHECK(p->postgres);
  {
    auto db = sql::Db::Open(pg, false, 1000).value();
    REQUIRE(db.Exec("ALTER TABLE runs DROP COLUMN log_path"));
  }
  auto pbroken = CheckStore(pg);
  REQUIRE(pbroken);
  CHECK_FALSE(pbroken->ok());
  CHECK(pbroken->problems.at(0).find("column runs.log_path missing") != std::string::npos);
}

TEST_CASE("A password given apart from the URL reaches PostgreSQL and no message", "[postgres]") {
  if (!testing::PostgresInstalled()) {
    WARN("PostgreSQL 15 is not installed (ci/install-deps installs postgresql-15)");
    return;
  }
  auto login = testing::PostgresPasswordLogin();
  sql::SetPostgresPassword("");
  auto refused = Store::Open(login.url);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("password") != std::string::npos);
  sql::SetPostgresPassword("wrong-" + login.password);
  auto wrong = Store::Open(login.url);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message.find(login.password) == std::string::npos);
  sql::SetPostgresPassword(login.password);
  auto store = Store::Open(login.url);
  sql::SetPostgresPassword("");
  REQUIRE(store);
  CHECK(store->schema_version() == Store::kSchemaVersion);
}

}  // namespace
}  // namespace trainq
