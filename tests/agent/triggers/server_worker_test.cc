// PushProcessor with real git: what each kind of push queues, and what a
// failing fetch or a bad trainq.yaml leaves behind.
#include "agent/triggers/push_pipeline.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <algorithm>
#include <filesystem>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/results/status.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/forge_status.h"
#include "core/strings.h"
#include "tests/agent/mistakes_table.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

using testing::GitCli;

const char* kManifest = R"(version: 1
defaults:
  repeats: 3
experiments:
  a:
    command: echo a {seed}
    watch: [configs/a.yaml, shared/**]
  b:
    command: echo b {seed}
    watch: [configs/b.yaml, shared/**]
)";

struct World {
  testing::TempDir tmp;
  GitCli git{tmp / "origin"};
  std::string url = "file://" + (tmp / "origin");
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config;
  std::string base;
  std::int64_t deliveries = 0;

  explicit World(const std::string& extra = "") {
    auto c = ParseServerConfig("repositories:\n  - url: " + url + "\n" + extra, "server.yaml");
    REQUIRE(c);
    config = *c;
    base = git.Commit({{"trainq.yaml", kManifest},
                       {"configs/a.yaml", "lr: 1\n"},
                       {"configs/b.yaml", "lr: 2\n"},
                       {"README", "hi\n"}},
                      "base");
  }

  PushPipelineOptions Options() {
    PushPipelineOptions o;
    o.data_dir = tmp / "data";
    o.fetch_retry_base_ms = 1000;
    o.fetch_attempts = 3;
    return o;
  }

  // Records a push as a webhook would and processes everything that is due.
  Pushes::Push Push(const std::string& ref, const std::string& before, const std::string& after,
                   const std::string& default_branch = "") {
    Pushes::Push p;
    p.default_branch = default_branch;
    p.source = "github";
    p.delivery_id = "d" + std::to_string(++deliveries);
    p.repo_url = url;
    p.ref = ref;
    p.before_sha = before;
    p.after_sha = after;
    auto id = store.pushes().RecordPush(p, clock.Now()).value();
    REQUIRE(id);
    MirrorCache mirrors(tmp / "data");
    PushProcessor proc(store, config, mirrors, clock, Options());
    REQUIRE(proc.ProcessDue(10));
    return *store.pushes().GetPush(*id).value();
  }

  // Records a pull request's head as the webhook does and processes it.
  Pushes::Push PullRequest(std::int64_t number, const std::string& head, const std::string& target) {
    Pushes::Push p;
    p.source = "github";
    p.delivery_id = "d" + std::to_string(++deliveries);
    p.repo_url = url;
    p.ref = "refs/pull/" + std::to_string(number) + "/head";
    p.before_sha = std::string(kZeroSha);
    p.after_sha = head;
    p.pr_number = number;
    p.target_branch = target;
    auto id = store.pushes().RecordPush(p, clock.Now()).value();
    REQUIRE(id);
    MirrorCache mirrors(tmp / "data");
    PushProcessor proc(store, config, mirrors, clock, Options());
    REQUIRE(proc.ProcessDue(10));
    return *store.pushes().GetPush(*id).value();
  }

  // experiment -> reason, for the batches of `sha`.
  std::map<std::string, std::string> Batches(const std::string& sha) {
    std::map<std::string, std::string> out;
    auto all = store.runs().Batches(false, 0).value();
    for (const auto& b : all) {
      // What the push triggered; baselines queued for it are counted apart.
      if (b.sha == sha && !b.reason.starts_with("baseline for ")) out[b.experiment] = b.reason;
    }
    return out;
  }
};

std::vector<std::string> Keys(const std::map<std::string, std::string>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

TEST_CASE("push: a commit touching one experiment's config queues exactly that one",
          "[server_worker]") {
  World w;
  std::string c = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "tune b");
  auto p = w.Push("refs/heads/main", w.base, c);
  INFO(p.error);
  CHECK(p.state == "done");
  // The base never ran b: its baseline is queued there with the same seeds.
  CHECK(p.result == c.substr(0, 10) + ": queued b (baseline: batch 2 queued at the base " +
                        w.base.substr(0, 7) + " with the same seeds)");
  auto batches = w.Batches(c);
  REQUIRE(Keys(batches) == std::vector<std::string>{"b"});
  CHECK(batches["b"] == "github push to main: configs/b.yaml matches watch 'configs/b.yaml'");
  // The batch runs from the mirror, with 3 seeds.
  auto b = w.store.runs().Batches(false, 0).value().back();
  CHECK(b.sha == c);
  CHECK(b.repeats == 3);
  auto leased = w.store.runs().Lease("t", w.clock.Now(), 60'000, 10).value();
  REQUIRE(leased.size() == 6);  // its 3 seeds, and the same 3 at the base
  CHECK(leased[0].repo_url.find("/data/mirrors/") != std::string::npos);
  CHECK(leased[0].sha == c);

  // A commit touching nothing watched queues nothing.
  std::string readme = w.git.Commit({{"README", "changed\n"}}, "docs");
  auto p2 = w.Push("refs/heads/main", c, readme);
  CHECK(p2.state == "done");
  CHECK(p2.result == readme.substr(0, 10) + ": no watched path or experiment changed");
  CHECK(w.Batches(readme).empty());
}

TEST_CASE("push: several commits give the head the batches, per_commit gives each its own",
          "[server_worker]") {
  SECTION("head only") {
    World w;
    std::string c1 = w.git.Commit({{"configs/a.yaml", "lr: 5\n"}}, "a");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b");
    auto p = w.Push("refs/heads/main", w.base, c2);
    CHECK(p.state == "done");
    CHECK(w.Batches(c1).empty());
    CHECK(Keys(w.Batches(c2)) == std::vector<std::string>{"a", "b"});
  }
  SECTION("per_commit: true") {
    World w("    per_commit: true\n");
    std::string c1 = w.git.Commit({{"configs/a.yaml", "lr: 5\n"}}, "a");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b");
    auto p = w.Push("refs/heads/main", w.base, c2);
    CHECK(p.state == "done");
    CHECK(p.result.starts_with(c1.substr(0, 10) + ": queued a (baseline: "));
    CHECK(p.result.find("; " + c2.substr(0, 10) + ": queued b (baseline: ") != std::string::npos);
    CHECK(Keys(w.Batches(c1)) == std::vector<std::string>{"a"});
    CHECK(Keys(w.Batches(c2)) == std::vector<std::string>{"b"});
  }
}

TEST_CASE("push: a new branch is compared with its merge-base with the default branch",
          "[server_worker]") {
  World w;
  w.git.Run("checkout -q -b feature");
  std::string f1 = w.git.Commit({{"configs/a.yaml", "lr: 9\n"}}, "feature a");
  std::string f2 = w.git.Commit({{"README", "x\n"}}, "feature docs");
  w.git.Run("checkout -q main");  // the remote's HEAD names its default branch
  auto p = w.Push("refs/heads/feature", std::string(kZeroSha), f2);
  INFO(p.error);
  CHECK(p.state == "done");
  auto batches = w.Batches(f2);
  REQUIRE(Keys(batches) == std::vector<std::string>{"a"});
  CHECK(batches["a"] == "github push to feature: new branch: compared with the merge-base " +
                            w.base.substr(0, 10) +
                            " with main; configs/a.yaml matches watch 'configs/a.yaml'");
  (void)f1;

  // A new branch at an existing commit changes nothing.
  w.git.Run("branch other " + w.base);
  auto p2 = w.Push("refs/heads/other", std::string(kZeroSha), w.base);
  CHECK(p2.result == "no new commits: nothing runs");
}

TEST_CASE("push: a force push is compared with the merge-base of old and new head",
          "[server_worker]") {
  World w;
  std::string old_head = w.git.Commit({{"configs/a.yaml", "lr: 7\n"}}, "a, to be rewritten");
  w.git.Run("reset -q --hard " + w.base);
  std::string rewritten = w.git.Commit({{"configs/b.yaml", "lr: 7\n"}}, "b instead");
  // The mirror must know the old head, as it would from the earlier push.
  MirrorCache mirrors(w.tmp / "data");
  w.git.Run("branch keep " + old_head);
  REQUIRE(mirrors.Get(w.url).value()->Fetch({}));
  auto p = w.Push("refs/heads/main", old_head, rewritten);
  INFO(p.error);
  CHECK(p.state == "done");
  auto batches = w.Batches(rewritten);
  REQUIRE(Keys(batches) == std::vector<std::string>{"b"});
  CHECK(batches["b"].find("force push: compared with the merge-base " + w.base.substr(0, 10)) !=
        std::string::npos);
}

TEST_CASE("push: an old head the remote no longer has falls back to a safe base",
          "[server_worker]") {
  World w;
  std::string unknown(40, 'b');
  std::string c = w.git.Commit({{"configs/a.yaml", "lr: 6\n"}}, "a");
  auto p = w.Push("refs/heads/main", unknown, c);
  INFO(p.error);
  CHECK(p.state == "done");
  auto batches = w.Batches(c);
  REQUIRE(Keys(batches) == std::vector<std::string>{"a"});
  CHECK(batches["a"] == "github push to main: old head bbbbbbbbbb unknown: compared with the "
                        "parent of " + c.substr(0, 10) +
                        "; configs/a.yaml matches watch 'configs/a.yaml'");

  w.git.Run("checkout -q -b topic");
  std::string t = w.git.Commit({{"configs/b.yaml", "lr: 6\n"}}, "b on topic");
  w.git.Run("checkout -q main");
  auto p2 = w.Push("refs/heads/topic", unknown, t);
  CHECK(p2.state == "done");
  CHECK(Keys(w.Batches(t)) == std::vector<std::string>{"b"});
  CHECK(w.Batches(t)["b"].find("old head bbbbbbbbbb unknown: compared with the merge-base") !=
        std::string::npos);
}

TEST_CASE("push: trainq.yaml edits run the experiments whose entry changed", "[server_worker]") {
  World w;
  std::string text = kManifest;
  text.replace(text.find("echo a {seed}"), 13, "echo A {seed}");
  std::string c = w.git.Commit({{"trainq.yaml", text}}, "change a's command");
  w.Push("refs/heads/main", w.base, c);
  auto batches = w.Batches(c);
  REQUIRE(Keys(batches) == std::vector<std::string>{"a"});
  CHECK(batches["a"] == "github push to main: its entry in trainq.yaml changed");

  std::string shared = w.git.Commit({{"shared/util.py", "x = 1\n"}}, "shared code");
  w.Push("refs/heads/main", c, shared);
  CHECK(Keys(w.Batches(shared)) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("push: a bad trainq.yaml fails the push at once with file:line", "[server_worker]") {
  World w;
  std::string c = w.git.Commit({{"trainq.yaml", std::string(kManifest) + "    repeats: ten\n"}},
                               "oops");
  auto p = w.Push("refs/heads/main", w.base, c);
  CHECK(p.state == "failed");
  CHECK(p.attempts == 0);
  CHECK(p.error.find("trainq.yaml:11: experiments.b.repeats") != std::string::npos);
  CHECK(w.Batches(c).empty());
}

TEST_CASE("push: each usual mistake fails the push at once with file:line:key, nothing queued",
          "[server_worker]") {
  for (const auto& m : testing::Mistakes()) {
    DYNAMIC_SECTION(m.what) {
      World w;
      std::string c = w.git.Commit(m.files, m.what);
      auto p = w.Push("refs/heads/main", w.base, c);
      CHECK(p.state == "failed");
      CHECK(p.attempts == 0);
      CHECK_THAT(p.error, Catch::Contains(c.substr(0, 10)));
      for (const auto& e : m.expected) CHECK_THAT(p.error, Catch::Contains(e));
      CHECK(w.store.runs().Batches(false, 0).value().empty());
    }
  }
}

TEST_CASE("push: limits come from the repository's entry in server.yaml", "[server_worker]") {
  World w("    limits: {runs: 4}\n");
  std::string c = w.git.Commit({{"configs/a.yaml", "lr: 9\n"}, {"configs/b.yaml", "lr: 9\n"}},
                               "both");
  auto p = w.Push("refs/heads/main", w.base, c);
  CHECK(p.state == "failed");
  CHECK_THAT(p.error, Catch::Contains("6 runs in one submission, more than the limit of 4"));
}

TEST_CASE("push: a fetch that keeps failing is retried with backoff, then the push's error",
          "[server_worker]") {
  World w;
  std::string c = w.git.Commit({{"configs/a.yaml", "lr: 8\n"}}, "a");
  std::filesystem::rename(w.tmp / "origin", w.tmp / "moved");  // the remote is gone
  auto p = w.Push("refs/heads/main", w.base, c);
  CHECK(p.state == "pending");
  CHECK(p.attempts == 1);
  CHECK(p.not_before_ms == w.clock.Now() + 1000);
  CHECK(p.error.find("fetching") != std::string::npos);

  MirrorCache mirrors(w.tmp / "data");
  PushProcessor proc(w.store, w.config, mirrors, w.clock, w.Options());
  CHECK(proc.ProcessDue(10).value() == 0);  // not due yet
  w.clock.Advance(1000);
  CHECK(proc.ProcessDue(10).value() == 1);
  auto p2 = *w.store.pushes().GetPush(p.id).value();
  CHECK(p2.state == "pending");
  CHECK(p2.attempts == 2);
  CHECK(p2.not_before_ms == w.clock.Now() + 2000);  // doubled
  w.clock.Advance(2000);
  CHECK(proc.ProcessDue(10).value() == 1);
  auto p3 = *w.store.pushes().GetPush(p.id).value();
  CHECK(p3.state == "failed");
  CHECK(p3.error.find("fetching file://") != std::string::npos);

  // `trainq status` shows it.
  auto j = StatusJson(w.store, "t.db", w.clock.Now()).value();
  CHECK(j["pushes"]["counts"]["failed"] == 1);
  CHECK(j["pushes"]["recent"][0]["state"] == "failed");
  CHECK(j["pushes"]["recent"][0]["error"].get<std::string>().find("fetching") !=
        std::string::npos);
}

TEST_CASE("push: a commit the remote does not have is retried like a failed fetch",
          "[server_worker]") {
  World w;
  auto p = w.Push("refs/heads/main", w.base, std::string(40, 'a'));
  CHECK(p.state == "pending");
  CHECK(p.error == "commit aaaaaaaaaa not found in " + w.url + " after fetching");
}

TEST_CASE("push: tags run every experiment when tags are on", "[server_worker]") {
  World w("    tags: true\n");
  w.git.Run("tag v1");
  auto p = w.Push("refs/tags/v1", std::string(kZeroSha), w.base);
  INFO(p.error);
  CHECK(p.state == "done");
  auto batches = w.Batches(w.base);
  CHECK(Keys(batches) == std::vector<std::string>{"a", "b"});
  CHECK(batches["a"].starts_with("github push to v1: new tag: every experiment runs"));
}

TEST_CASE("push: a pull request's head is fetched from refs/pull/N/head and compared with the "
          "merge-base with its target",
          "[server_worker][pr]") {
  World w;
  // The mirror knows main at base.
  w.Push("refs/heads/main", std::string(kZeroSha), w.base);
  w.git.Run("checkout -q -b feature");
  std::string head = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "tune b");
  w.git.Run("checkout -q main");
  std::string moved = w.git.Commit({{"configs/a.yaml", "lr: 9\n"}}, "main moves on: a");
  // Only the forge's pull ref holds the head, as for a pull request from a fork.
  w.git.Run("update-ref refs/pull/4/head " + head);
  w.git.Run("branch -q -D feature");

  auto p = w.PullRequest(4, head, "main");
  INFO(p.error);
  CHECK(p.state == "done");
  CHECK(p.result.starts_with(head.substr(0, 10) + ": queued b"));
  auto batches = w.Batches(head);
  REQUIRE(Keys(batches) == std::vector<std::string>{"b"});  // a changed on main, not in the PR
  CHECK(batches["b"] == "github pull request #4 into main: compared with the merge-base " +
                            w.base.substr(0, 10) +
                            " with main; configs/b.yaml matches watch 'configs/b.yaml'");
  (void)moved;

  // A target branch that does not exist: compared with nothing, every experiment runs.
  std::string lone = w.git.Commit({{"README", "more\n"}}, "readme");
  w.git.Run("update-ref refs/pull/5/head " + lone);
  auto q = w.PullRequest(5, lone, "nope");
  CHECK(q.state == "done");
  CHECK(Keys(w.Batches(lone)) == std::vector<std::string>{"a", "b"});
  CHECK(w.Batches(lone)["a"].starts_with(
      "github pull request #5 into nope: no branch nope, compared with nothing; "));
}

TEST_CASE("push: a pull request whose head was already pushed to a branch queues nothing twice",
          "[server_worker][pr]") {
  World w;
  w.Push("refs/heads/main", std::string(kZeroSha), w.base);
  w.git.Run("checkout -q -b feature");
  std::string head = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "tune b");
  w.git.Run("checkout -q main");  // the remote's HEAD names the default branch
  w.Push("refs/heads/feature", std::string(kZeroSha), head);
  REQUIRE(w.Batches(head).size() == 1);
  std::string reason = w.Batches(head)["b"];
  w.git.Run("update-ref refs/pull/6/head " + head);
  auto p = w.PullRequest(6, head, "main");
  CHECK(p.state == "done");
  CHECK(w.Batches(head).size() == 1);
  CHECK(w.Batches(head)["b"] == reason);  // the batch of the branch push, kept
  auto all = w.store.runs().Batches(false, 0).value();
  CHECK(std::count_if(all.begin(), all.end(), [&](const BatchProgress& b) {
          return b.sha == head;
        }) == 1);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// The fake forge: GitHub's status API on loopback, recording what it was sent.
struct StatusWorld {
  testing::TestHttpServer forge{[](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, R"({"id": 1})", {}};
  }};
  testing::TempDir token_dir;
  World w;

  StatusWorld()
      : w("    forge: github\n    project: acme/model\n    status: true\n    api_url: " +
          forge.url() + "\n    token: {file: " + TokenFile() + "}\n") {}

  std::string TokenFile() {
    REQUIRE(WriteFile(token_dir / "token", "forge-token"));
    return token_dir / "token";
  }

  // Posts what is due, as serve's status thread does; the bodies the forge got.
  std::vector<json> Post() {
    CurlHttpClient http;
    StatusReporter reporter(w.store, w.config, http, w.clock);
    REQUIRE(reporter.Step());
    std::vector<json> out;
    for (const auto& r : forge.requests()) out.push_back(json::parse(r.body));
    return out;
  }
};

TEST_CASE("push: a push whose trainq.yaml is bad gets a failure status naming file:line:key",
          "[server_worker][forge_status]") {
  StatusWorld s;
  std::string c = s.w.git.Commit(
      {{"trainq.yaml", std::string(kManifest) + "    repats: 5\n"}}, "typo");
  auto p = s.w.Push("refs/heads/main", s.w.base, c);
  REQUIRE(p.state == "failed");
  auto row = s.w.store.pushes().GetPushStatus(p.id).value();
  REQUIRE(row);
  CHECK(row->state == "failure");
  CHECK(row->batch_id == 0);
  auto sent = s.Post();
  REQUIRE(sent.size() == 1);
  CHECK(s.forge.requests()[0].target == "/repos/acme/model/statuses/" + c);
  CHECK(sent[0]["state"] == "failure");
  CHECK(sent[0]["context"] == "trainq");
  // The error itself, without the "<url> at <sha>: " it was wrapped in.
  CHECK_THAT(sent[0]["description"].get<std::string>(),
             Catch::StartsWith("trainq.yaml:11: experiments.b.repats: unknown key"));
  CHECK(sent[0]["description"].get<std::string>().size() <= 140);
  CHECK(s.w.store.pushes().GetPushStatus(p.id).value()->posted_state == "failure");
  CHECK(s.Post().size() == 1);  // posted once
}

TEST_CASE("push: a push whose fetch kept failing gets an error status", "[server_worker]") {
  StatusWorld s;
  std::string c = s.w.git.Commit({{"configs/a.yaml", "lr: 8\n"}}, "a");
  std::filesystem::rename(s.w.tmp / "origin", s.w.tmp / "moved");
  auto p = s.w.Push("refs/heads/main", s.w.base, c);
  CHECK(p.state == "pending");
  CHECK_FALSE(s.w.store.pushes().GetPushStatus(p.id).value());  // still retried: no status yet
  MirrorCache mirrors(s.w.tmp / "data");
  PushProcessor proc(s.w.store, s.w.config, mirrors, s.w.clock, s.w.Options());
  s.w.clock.Advance(1000);
  REQUIRE(proc.ProcessDue(10));
  s.w.clock.Advance(2000);
  REQUIRE(proc.ProcessDue(10));
  REQUIRE(s.w.store.pushes().GetPush(p.id).value()->state == "failed");
  auto sent = s.Post();
  REQUIRE(sent.size() == 1);
  CHECK(sent[0]["state"] == "error");
  CHECK_THAT(sent[0]["description"].get<std::string>(), Catch::StartsWith("fetching file://"));
}

TEST_CASE("push: a failed push's status description is one line of at most 140 characters",
          "[server_worker]") {
  CHECK(FailedPushDescription("file:///r at 0123456789: trainq.yaml:3: bad\nmore", "file:///r") ==
        "trainq.yaml:3: bad more");
  std::string long_text = "x: " + std::string(200, 'y');
  auto d = FailedPushDescription(long_text, "file:///r");
  CHECK(d.size() == 140);
  CHECK(d.ends_with("..."));
  // A cut never splits a UTF-8 character.
  std::string wide = std::string(136, 'a') + "±±±";
  CHECK(FailedPushDescription(wide, "u") == std::string(136, 'a') + "...");
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// state -> count, for the batch of experiment b at `sha`.
std::map<RunState, int> RunsOfB(World& w, const std::string& sha) {
  std::map<RunState, int> out;
  auto batches = w.store.runs().Batches(false, 0).value();
  for (const auto& b : batches) {
    if (b.sha != sha || b.experiment != "b") continue;
    auto runs = w.store.runs().Runs(b.id, std::nullopt, 1000).value();
    for (const auto& r : runs) ++out[r.state];
  }
  return out;
}

// Three quick pushes to `ref`, each tuning b: base -> c1 -> c2 -> c3. One
// run of c1 is leased before the third push.
struct ThreePushes {
  std::string c1, c2, c3;
  ThreePushes(World& w, const std::string& ref) {
    c1 = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "b 3");
    REQUIRE(w.Push(ref, w.base, c1, "main").state == "done");
    c2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "b 4");
    REQUIRE(w.Push(ref, c1, c2, "main").state == "done");
    // A machine takes the oldest queued run: the base's baseline or c1's.
    for (int i = 0; i < 8 && RunsOfB(w, c1)[RunState::kLeased] == 0; ++i) {
      REQUIRE(w.store.runs().Lease("m", w.clock.Now(), 60'000, 1).value().size() == 1);
    }
    REQUIRE(RunsOfB(w, c1)[RunState::kLeased] == 1);
    c3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b 5");
    REQUIRE(w.Push(ref, c2, c3, "main").state == "done");
  }
};

TEST_CASE("push: a newer push to a branch cancels the queued runs of the head it superseded",
          "[server_worker][coalesce]") {
  World w;
  ThreePushes p(w, "refs/heads/feature");
  // c1 is superseded twice over: its queued runs are cancelled, the leased
  // one goes on.
  auto c1 = RunsOfB(w, p.c1);
  CHECK(c1[RunState::kCancelled] == 2);
  CHECK(c1[RunState::kLeased] == 1);
  CHECK(c1[RunState::kQueued] == 0);
  // c2 is what c3 is compared with: kept. c3 waits for machines.
  CHECK(RunsOfB(w, p.c2)[RunState::kQueued] == 3);
  CHECK(RunsOfB(w, p.c3)[RunState::kQueued] == 3);
  CHECK(RunsOfB(w, p.c2)[RunState::kCancelled] == 0);
  // The base's baseline batch is untouched.
  CHECK(RunsOfB(w, w.base)[RunState::kCancelled] == 0);
}

TEST_CASE("push: coalescing leaves the default branch alone, and follows `coalesce:`",
          "[server_worker][coalesce]") {
  SECTION("the default branch keeps every head (coalesce: branches, the default)") {
    World w;
    ThreePushes p(w, "refs/heads/main");
    CHECK(RunsOfB(w, p.c1)[RunState::kCancelled] == 0);
    CHECK(RunsOfB(w, p.c1)[RunState::kQueued] == 2);
  }
  SECTION("coalesce: off keeps every head of every branch") {
    World w("    coalesce: off\n");
    ThreePushes p(w, "refs/heads/feature");
    CHECK(RunsOfB(w, p.c1)[RunState::kCancelled] == 0);
  }
  SECTION("coalesce: all coalesces the default branch too") {
    World w("    coalesce: all\n");
    ThreePushes p(w, "refs/heads/main");
    CHECK(RunsOfB(w, p.c1)[RunState::kCancelled] == 2);
  }
  SECTION("a head another branch also points at is kept") {
    World w;
    std::string c1 = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "b 3");
    REQUIRE(w.Push("refs/heads/feature", w.base, c1, "main").state == "done");
    REQUIRE(w.Push("refs/heads/other", w.base, c1, "main").state == "done");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "b 4");
    REQUIRE(w.Push("refs/heads/feature", c1, c2, "main").state == "done");
    std::string c3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b 5");
    REQUIRE(w.Push("refs/heads/feature", c2, c3, "main").state == "done");
    CHECK(RunsOfB(w, c1)[RunState::kCancelled] == 0);
    CHECK(RunsOfB(w, c1)[RunState::kQueued] == 3);
  }
}

// Regression (fault probe a4598a0, F4/t18): coalescing kept a head only when
// one of the 500 newest pushes named it, and cancelled every batch at a
// superseded sha whichever ref had queued it. A pull request opened at
// main's head and synchronized to a sibling after 500 other pushes cancelled
// main's queued runs.
TEST_CASE("push: a pull request synchronized after 500 other pushes leaves the default branch's "
          "queued runs alone (t18)",
          "[server_worker][coalesce]") {
  World w;
  std::string a = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "A: b 3");
  REQUIRE(w.Push("refs/heads/main", w.base, a, "main").state == "done");
  REQUIRE(RunsOfB(w, a)[RunState::kQueued] == 3);
  // 500 pushes to other branches: main's push is no longer among the newest.
  for (int i = 0; i < 500; ++i) {
    Pushes::Push p;
    p.source = "github";
    p.delivery_id = "filler-" + std::to_string(i);
    p.repo_url = w.url;
    p.ref = "refs/heads/junk-" + std::to_string(i);
    p.before_sha = w.base;
    p.after_sha = w.base;
    p.state = "skipped";
    REQUIRE(w.store.pushes().RecordPush(p, w.clock.Now()).value());
  }
  w.git.Run("update-ref refs/pull/1/head " + a);
  REQUIRE(w.PullRequest(1, a, "main").state == "done");
  // Synchronized to X2, a sibling of A (both children of the base).
  w.git.Run("checkout -q -b side " + w.base);
  std::string x2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "X2: b 4");
  w.git.Run("update-ref refs/pull/1/head " + x2);
  REQUIRE(w.PullRequest(1, x2, "main").state == "done");
  CHECK(RunsOfB(w, a)[RunState::kQueued] == 3);
  CHECK(RunsOfB(w, a)[RunState::kCancelled] == 0);
  CHECK(RunsOfB(w, x2)[RunState::kQueued] == 3);
  // The pull request's own heads still coalesce: X3 (rewritten from the
  // base) cancels X2's runs.
  w.git.Run("checkout -q -b side2 " + w.base);
  std::string x3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "X3: b 5");
  w.git.Run("update-ref refs/pull/1/head " + x3);
  REQUIRE(w.PullRequest(1, x3, "main").state == "done");
  CHECK(RunsOfB(w, x2)[RunState::kCancelled] == 3);
  CHECK(RunsOfB(w, x3)[RunState::kQueued] == 3);
  CHECK(RunsOfB(w, a)[RunState::kQueued] == 3);
}

TEST_CASE("push: coalescing cancels only the batches the same ref's pushes queued",
          "[server_worker][coalesce]") {
  SECTION("a feature branch's head that main queued first is not the feature's to cancel") {
    World w;
    std::string c1 = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "b 3");
    REQUIRE(w.Push("refs/heads/main", w.base, c1, "main").state == "done");
    // feature starts at main's head, then moves on twice.
    REQUIRE(w.Push("refs/heads/feature", std::string(kZeroSha), c1, "main").state == "done");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "b 4");
    REQUIRE(w.Push("refs/heads/feature", c1, c2, "main").state == "done");
    std::string c3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b 5");
    REQUIRE(w.Push("refs/heads/feature", c2, c3, "main").state == "done");
    CHECK(RunsOfB(w, c1)[RunState::kQueued] == 3);
    CHECK(RunsOfB(w, c1)[RunState::kCancelled] == 0);
    CHECK(RunsOfB(w, c2)[RunState::kQueued] == 3);  // what c3 is compared with
  }
  SECTION("a batch queued by `trainq submit` (no ref) is never cancelled") {
    World w;
    std::string c1 = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "b 3");
    // As `trainq submit` does: the batch carries no ref.
    auto mirror = Mirror::Open(Mirror::PathFor(w.tmp / "data", w.url), w.url).value();
    REQUIRE(mirror.Fetch({}));
    BatchSpec spec;
    spec.experiment = "b";
    spec.command = "echo b {seed}";
    spec.metric_name = "accuracy";
    spec.repeats = 3;
    REQUIRE(w.store.runs().Submit(mirror.location(), mirror.Resolve(c1).value(), {spec},
                                  w.clock.Now()));
    REQUIRE(w.Push("refs/heads/feature", w.base, c1, "main").state == "done");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "b 4");
    REQUIRE(w.Push("refs/heads/feature", c1, c2, "main").state == "done");
    std::string c3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b 5");
    REQUIRE(w.Push("refs/heads/feature", c2, c3, "main").state == "done");
    CHECK(RunsOfB(w, c1)[RunState::kCancelled] == 0);
    CHECK(RunsOfB(w, c1)[RunState::kQueued] == 3);
  }
  SECTION("per_commit: the commits between two heads are not superseded") {
    World w("    per_commit: true\n");
    std::string c1 = w.git.Commit({{"configs/b.yaml", "lr: 3\n"}}, "b 3");
    std::string c2 = w.git.Commit({{"configs/b.yaml", "lr: 4\n"}}, "b 4");
    REQUIRE(w.Push("refs/heads/feature", w.base, c2, "main").state == "done");
    std::string c3 = w.git.Commit({{"configs/b.yaml", "lr: 5\n"}}, "b 5");
    REQUIRE(w.Push("refs/heads/feature", c2, c3, "main").state == "done");
    std::string c4 = w.git.Commit({{"configs/b.yaml", "lr: 6\n"}}, "b 6");
    REQUIRE(w.Push("refs/heads/feature", c3, c4, "main").state == "done");
    CHECK(RunsOfB(w, c1)[RunState::kCancelled] == 0);  // never a head
    CHECK(RunsOfB(w, c2)[RunState::kCancelled] == 3);  // the first push's head
    CHECK(RunsOfB(w, c3)[RunState::kQueued] == 3);     // what c4 is compared with
  }
}

}  // namespace
}  // namespace trainq
