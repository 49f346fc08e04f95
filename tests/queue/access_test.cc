// The access part of the Store: personal API tokens (kept hashed) and the
// audit trail.
#include <catch2/catch.hpp>

#include "queue/access.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

Access::TokenRow Token(const std::string& hash, const std::string& owner, const std::string& role) {
  Access::TokenRow t;
  t.hash = hash;
  t.name = "ci";
  t.owner = owner;
  t.role = role;
  t.created_by = owner;
  t.created_ms = kT0;
  return t;
}

}  // namespace

TEST_CASE("A personal token is found by its hash, listed by owner and revoked once") {
  testing::TempDir dir;
  auto store = Store::Open(testing::StoreLocation(dir, "q.db"));
  REQUIRE(store);
  auto& a = store->access();
  auto t = Token("h1", "ada@example.com", "write");
  t.expires_ms = kT0 + 1000;
  auto id = a.AddToken(t);
  REQUIRE(id);
  REQUIRE(a.AddToken(Token("h2", "bob@example.com", "read")));
  // The hash is unique: the same secret cannot be two tokens.
  CHECK_FALSE(a.AddToken(Token("h1", "bob@example.com", "read")));
  // A role outside read/write/admin is refused by the table itself.
  CHECK_FALSE(a.AddToken(Token("h3", "bob@example.com", "owner")));

  auto found = a.FindToken("h1");
  REQUIRE(found);
  REQUIRE(*found);
  CHECK((*found)->owner == "ada@example.com");
  CHECK((*found)->live(kT0 + 999));
  CHECK_FALSE((*found)->live(kT0 + 1000));  // expired
  CHECK_FALSE(*a.FindToken("nope"));

  CHECK(a.ListTokens("ada@example.com")->size() == 1);
  CHECK(a.ListTokens("")->size() == 2);

  REQUIRE(a.TouchToken(*id, kT0 + 10, "10.0.0.5", 60'000));
  REQUIRE(a.TouchToken(*id, kT0 + 20, "10.0.0.5", 60'000));  // within a minute: not written
  auto touched = a.GetToken(*id);
  REQUIRE(touched);
  CHECK((*touched)->last_used_ms == kT0 + 10);
  CHECK((*touched)->last_used_from == "10.0.0.5");

  CHECK(*a.RevokeToken(*id, kT0 + 30));
  CHECK_FALSE(*a.RevokeToken(*id, kT0 + 40));  // once
  CHECK_FALSE((*a.FindToken("h1"))->live(kT0 + 31));
  CHECK((*a.GetToken(*id))->revoked_ms == kT0 + 30);
}

TEST_CASE("Audit rows come back newest first from a time on, by target when asked") {
  testing::TempDir dir;
  auto store = Store::Open(testing::StoreLocation(dir, "q.db"));
  REQUIRE(store);
  auto& a = store->access();
  REQUIRE(a.AddAudit({0, kT0, "ada@example.com", "cancel_run", "run 9", "1 run(s)", "10.0.0.5"}));
  REQUIRE(a.AddAudit({0, kT0 + 5, "bob@example.com", "retry_run", "run 9", "", "10.0.0.6"}));
  REQUIRE(a.AddAudit({0, kT0 + 9, "admin token", "token_created", "token 1 (ci)", "", "local"}));
  auto all = a.AuditSince(0, 100);
  REQUIRE(all);
  REQUIRE(all->size() == 3);
  CHECK(all->front().action == "token_created");
  CHECK(a.AuditSince(kT0 + 5, 100)->size() == 2);
  CHECK(a.AuditSince(0, 1)->size() == 1);
  auto run9 = a.AuditSince(0, 100, {"run 9", "batch 2"});
  REQUIRE(run9);
  REQUIRE(run9->size() == 2);
  CHECK(run9->front().who == "bob@example.com");
  CHECK(run9->back().address == "10.0.0.5");
}

TEST_CASE("Audit rows older than a time are pruned, oldest first, at most a given number") {
  testing::TempDir dir;
  auto store = Store::Open(testing::StoreLocation(dir, "q.db"));
  REQUIRE(store);
  auto& a = store->access();
  for (int i = 0; i < 5; ++i) {
    REQUIRE(a.AddAudit(
        {0, kT0 + i, "ada@example.com", "cancel_run", "run " + std::to_string(i), "", "10.0.0.5"}));
  }
  // Two rows at the same moment: the older id goes first.
  REQUIRE(a.AddAudit({0, kT0 + 3, "bob@example.com", "retry_run", "run 3", "", "10.0.0.6"}));
  auto n = a.PruneAudit(kT0 + 4, 2);
  REQUIRE(n);
  CHECK(*n == 2);
  auto left = a.AuditSince(0, 100);
  REQUIRE(left);
  REQUIRE(left->size() == 4);
  CHECK(left->back().target == "run 2");
  // run 2, then ada's run 3 (written before bob's, at the same moment).
  n = a.PruneAudit(kT0 + 4, 2);
  REQUIRE(n);
  CHECK(*n == 2);
  left = a.AuditSince(0, 100);
  REQUIRE(left);
  REQUIRE(left->size() == 2);
  CHECK(left->back().who == "bob@example.com");
  CHECK(*a.PruneAudit(kT0 + 4, 100) == 1);
  CHECK(*a.PruneAudit(kT0 + 4, 100) == 0);  // the row at kT0 + 4 is not older
  left = a.AuditSince(0, 100);
  REQUIRE(left);
  REQUIRE(left->size() == 1);
  CHECK(left->front().at_ms == kT0 + 4);
}
