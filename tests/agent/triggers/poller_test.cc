// Poller: moved heads of a real repository become pushes, deduplicated with
// webhooks, and go through the same processing.
#include "agent/triggers/poller.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>

#include "agent/triggers/forge.h"
#include "agent/triggers/push_pipeline.h"
#include "tests/support/git_cli.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

using testing::GitCli;

struct World {
  testing::TempDir tmp;
  GitCli git{tmp / "origin"};
  std::string url = "file://" + (tmp / "origin");
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config;
  MirrorCache mirrors{tmp / "data"};

  World() {
    auto c = ParseServerConfig("repositories:\n  - url: " + url +
                                   "\n    poll_interval: 30s\n    branches: [main, feature]\n",
                               "server.yaml");
    REQUIRE(c);
    config = *c;
  }
  const RepoConfig& repo() const { return config.repositories[0]; }
};

TEST_CASE("poller: the first look records heads, a moved head is a push, once", "[poller]") {
  World w;
  std::string c1 = w.git.Commit({{"a", "1"}}, "one");
  w.git.Run("branch old-branch");
  Poller poller(w.store, w.config, w.mirrors, w.clock);
  CHECK(poller.PollRepository(w.repo()).value() == 0);
  auto heads = w.store.pushes().RefHeads(w.url).value();
  CHECK(heads.size() == 2);
  CHECK(w.store.pushes().RecentPushes(10).value().empty());

  std::string c2 = w.git.Commit({{"a", "2"}}, "two");
  CHECK(poller.PollRepository(w.repo()).value() == 1);
  auto pushes = w.store.pushes().RecentPushes(10).value();
  REQUIRE(pushes.size() == 1);
  CHECK(pushes[0].source == "poll");
  CHECK(pushes[0].ref == "refs/heads/main");
  CHECK(pushes[0].before_sha == c1);
  CHECK(pushes[0].after_sha == c2);
  CHECK(pushes[0].state == "pending");
  CHECK(pushes[0].delivery_id == "poll:refs/heads/main:" + c1 + ".." + c2);
  CHECK(pushes[0].default_branch == "main");

  // Nothing moved: nothing recorded.
  CHECK(poller.PollRepository(w.repo()).value() == 0);
  CHECK(w.store.pushes().RecentPushes(10).value().size() == 1);
}

TEST_CASE("poller: new, deleted and unwatched branches", "[poller]") {
  World w;
  w.git.Commit({{"a", "1"}}, "one");
  Poller poller(w.store, w.config, w.mirrors, w.clock);
  REQUIRE(poller.PollRepository(w.repo()));
  w.git.Run("checkout -q -b feature");
  std::string f = w.git.Commit({{"b", "1"}}, "feature");
  w.git.Run("branch elsewhere");
  CHECK(poller.PollRepository(w.repo()).value() == 2);
  auto pushes = w.store.pushes().RecentPushes(10).value();
  std::map<std::string, Pushes::Push> by_ref;
  for (const auto& p : pushes) by_ref[p.ref] = p;
  CHECK(by_ref["refs/heads/feature"].before_sha == std::string(kZeroSha));
  CHECK(by_ref["refs/heads/feature"].after_sha == f);
  CHECK(by_ref["refs/heads/feature"].state == "pending");
  CHECK(by_ref["refs/heads/elsewhere"].state == "skipped");

  w.git.Run("checkout -q main");
  w.git.Run("branch -D feature");
  CHECK(poller.PollRepository(w.repo()).value() == 1);
  auto deleted = w.store.pushes().RecentPushes(1).value().front();
  CHECK(deleted.ref == "refs/heads/feature");
  CHECK(deleted.after_sha == std::string(kZeroSha));
  CHECK(deleted.state == "skipped");
  CHECK(deleted.result == "branch feature deleted: nothing runs");
}

TEST_CASE("poller: a head a webhook already recorded is not recorded again", "[poller]") {
  World w;
  std::string c1 = w.git.Commit({{"a", "1"}}, "one");
  Poller poller(w.store, w.config, w.mirrors, w.clock);
  REQUIRE(poller.PollRepository(w.repo()));
  std::string c2 = w.git.Commit({{"a", "2"}}, "two");
  Pushes::Push hook;
  hook.source = "github";
  hook.delivery_id = "gh-1";
  hook.repo_url = w.url;
  hook.ref = "refs/heads/main";
  hook.before_sha = c1;
  hook.after_sha = c2;
  REQUIRE(w.store.pushes().RecordPush(hook, w.clock.Now()).value());
  CHECK(poller.PollRepository(w.repo()).value() == 0);
  CHECK(w.store.pushes().RecentPushes(10).value().size() == 1);
}

TEST_CASE("poller: Step keeps the interval, survives a failing fetch, and feeds processing",
          "[poller]") {
  World w;
  const char* manifest =
      "version: 1\nexperiments:\n  a:\n    command: echo {seed}\n    repeats: 2\n"
      "    watch: [a]\n";
  w.git.Commit({{"trainq.yaml", manifest}, {"a", "1"}}, "one");
  Poller poller(w.store, w.config, w.mirrors, w.clock);
  CHECK(poller.Step().value() == 0);  // first look
  CHECK(poller.NextDue() == w.clock.Now() + 30'000);
  std::string c2 = w.git.Commit({{"a", "2"}}, "two");
  CHECK(poller.Step().value() == 0);  // not due yet
  w.clock.Advance(30'000);
  CHECK(poller.Step().value() == 1);

  PushPipelineOptions o;
  o.data_dir = w.tmp / "data";
  PushProcessor proc(w.store, w.config, w.mirrors, w.clock, o);
  CHECK(proc.ProcessDue(10).value() == 1);
  auto batches = w.store.runs().Batches(false, 0).value();
  REQUIRE(batches.size() == 2);  // a at c2, and its baseline queued at the first commit
  CHECK(batches[0].reason.starts_with("baseline for "));  // newest first
  CHECK(batches[1].sha == c2);
  CHECK(batches[1].reason == "poll of main: a matches watch 'a'");

  // The remote disappears: Step logs and goes on.
  std::filesystem::rename(w.tmp / "origin", w.tmp / "moved");
  w.clock.Advance(30'000);
  auto n = poller.Step();
  REQUIRE(n);
  CHECK(*n == 0);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

const char* kCatchUpManifest =
    "version: 1\nexperiments:\n  a:\n    command: echo {seed}\n    repeats: 2\n"
    "    watch: [a]\n";

// A repository with a forge and no poll_interval: caught up (issue 38).
struct CatchUpWorld {
  testing::TempDir tmp;
  GitCli git{tmp / "origin"};
  std::string url = "file://" + (tmp / "origin");
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config;
  MirrorCache mirrors{tmp / "data"};

  CatchUpWorld() {
    auto c = ParseServerConfig("repositories:\n  - url: " + url +
                                   "\n    forge: github\n    branches: [main]\n",
                               "server.yaml");
    REQUIRE(c);
    config = *c;
  }
  const RepoConfig& repo() const { return config.repositories[0]; }
  std::vector<Pushes::Push> AllPushes() { return store.pushes().RecentPushes(100).value(); }
};

TEST_CASE("catch-up: a push serve missed is recorded once, on a second look, and by no later look "
          "or restart",
          "[poller][catch_up]") {
  CatchUpWorld w;
  REQUIRE(CatchesUp(w.repo()));
  CHECK(w.repo().catch_up_s == 300);
  CHECK(CatchUpSettleMs(w.repo()) == 30'000);
  std::string c1 = w.git.Commit({{"trainq.yaml", kCatchUpManifest}, {"a", "1"}}, "one");
  {
    Poller first(w.store, w.config, w.mirrors, w.clock);
    CHECK(first.CatchUpRepository(w.repo()).value() == 0);  // first look: remembered
  }
  CHECK(w.store.pushes().RefHeads(w.url).value() ==
        std::vector<std::pair<std::string, std::string>>{{"refs/heads/main", c1}});
  // serve is down: a push and an unwatched branch it never hears of.
  std::string c2 = w.git.Commit({{"a", "2"}}, "two");
  w.git.Run("branch elsewhere");
  // serve starts again: the move is seen, then confirmed a settle later.
  Poller again(w.store, w.config, w.mirrors, w.clock);
  CHECK(again.Step().value() == 0);
  CHECK(again.NextDue() == w.clock.Now() + 30'000);
  w.clock.Advance(29'000);
  CHECK(again.Step().value() == 0);  // not due yet
  w.clock.Advance(1'000);
  CHECK(again.Step().value() == 1);
  auto pushes = w.AllPushes();
  REQUIRE(pushes.size() == 1);
  CHECK(pushes[0].source == "catch-up");
  CHECK(pushes[0].ref == "refs/heads/main");
  CHECK(pushes[0].before_sha == c1);
  CHECK(pushes[0].after_sha == c2);
  CHECK(pushes[0].delivery_id == "catch-up:refs/heads/main:" + c1 + ".." + c2);
  CHECK(pushes[0].state == "pending");
  CHECK(again.NextDue() == w.clock.Now() + 300'000);

  PushPipelineOptions o;
  o.data_dir = w.tmp / "data";
  PushProcessor proc(w.store, w.config, w.mirrors, w.clock, o);
  CHECK(proc.ProcessDue(10).value() == 1);
  auto batches = w.store.runs().Batches(false, 0).value();
  REQUIRE_FALSE(batches.empty());
  CHECK(batches.back().sha == c2);
  CHECK(batches.back().reason == "catch-up of main: a matches watch 'a'");

  // No later look, and no restart, records it again.
  w.clock.Advance(300'000);
  CHECK(again.Step().value() == 0);
  w.clock.Advance(30'000);
  CHECK(again.Step().value() == 0);
  Poller restarted(w.store, w.config, w.mirrors, w.clock);
  CHECK(restarted.CatchUpRepository(w.repo()).value() == 0);
  w.clock.Advance(30'000);
  CHECK(restarted.CatchUpRepository(w.repo()).value() == 0);
  CHECK(w.AllPushes().size() == 1);
  auto heads = w.store.pushes().RefHeads(w.url).value();
  for (const auto& [ref, sha] : heads) {
    CHECK(ref == "refs/heads/main");  // the unwatched branch is not followed
  }
}

TEST_CASE("catch-up: a webhook that arrives before the second look, and a fetch behind the "
          "recorded head, are not pushes",
          "[poller][catch_up]") {
  CatchUpWorld w;
  std::string c1 = w.git.Commit({{"a", "1"}}, "one");
  Poller poller(w.store, w.config, w.mirrors, w.clock);
  REQUIRE(poller.CatchUpRepository(w.repo()).value() == 0);
  std::string c2 = w.git.Commit({{"a", "2"}}, "two");
  CHECK(poller.CatchUpRepository(w.repo()).value() == 0);  // seen once
  // Its webhook was on its way.
  Pushes::Push hook;
  hook.source = "github";
  hook.delivery_id = "gh-1";
  hook.repo_url = w.url;
  hook.ref = "refs/heads/main";
  hook.before_sha = c1;
  hook.after_sha = c2;
  REQUIRE(w.store.pushes().RecordPush(hook, w.clock.Now()).value());
  w.clock.Advance(30'000);
  CHECK(poller.CatchUpRepository(w.repo()).value() == 0);
  CHECK(w.AllPushes().size() == 1);

  // The branch is back at c1 in the fetch (behind what was recorded).
  w.git.Run("reset -q --hard " + c1);
  CHECK(poller.CatchUpRepository(w.repo()).value() == 0);
  w.clock.Advance(30'000);
  CHECK(poller.CatchUpRepository(w.repo()).value() == 0);
  CHECK(w.AllPushes().size() == 1);
}

TEST_CASE("catch-up: `catch_up` sets the interval and the settle, off or poll_interval turns it off",
          "[poller][catch_up][server_config]") {
  auto parse = [](const std::string& extra) {
    auto c = ParseServerConfig(
        "repositories:\n  - url: file:///r\n    forge: github\n" + extra, "server.yaml");
    INFO((c ? "" : c.error().message));
    REQUIRE(c);
    return c->repositories[0];
  };
  auto ten = parse("    catch_up: 10s\n");
  CHECK(CatchesUp(ten));
  CHECK(ten.catch_up_s == 10);
  CHECK(CatchUpSettleMs(ten) == 1'000);
  CHECK_FALSE(CatchesUp(parse("    catch_up: off\n")));
  CHECK_FALSE(CatchesUp(parse("    poll_interval: 1m\n")));  // polling does it
  auto none = ParseServerConfig("repositories:\n  - url: file:///r\n    forge: none\n",
                                "server.yaml");
  REQUIRE(none);
  CHECK_FALSE(CatchesUp(none->repositories[0]));
  auto bad = ParseServerConfig(
      "repositories:\n  - url: file:///r\n    forge: github\n    catch_up: soon\n", "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("server.yaml:4") != std::string::npos);
  CHECK(bad.error().message.find("catch_up") != std::string::npos);
}

}  // namespace
}  // namespace trainq
