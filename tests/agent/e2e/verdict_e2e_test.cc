// End to end, the question trainq exists for: a push that changes an
// experiment gets a verdict against the right baseline, on the commit status.
// Real git (a bare origin whose post-receive hook sends signed GitHub
// webhooks), the real `trainq serve` with local workers, a fake status API on
// loopback. Commits: A (the first: every experiment runs), B (README only:
// nothing runs), C (makes x worse), D (makes it better again).
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::Daemon;
using testing::GitCli;

const char* kHook = R"(#!/bin/sh
while read old new ref; do
  body=$(printf '{"ref":"%s","before":"%s","after":"%s","repository":{"clone_url":"%s","full_name":"test/origin","default_branch":"main"}}' "$ref" "$old" "$new" "$ORIGIN_URL")
  sig=$(printf '%s' "$body" | python3 -c 'import hashlib, hmac, os, sys; print(hmac.new(os.environ["WEBHOOK_SECRET"].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())')
  delivery=$(python3 -c 'import uuid; print(uuid.uuid4())')
  curl -sS -m 10 -o /dev/null -w 'webhook: %{http_code}\n' -X POST \
    -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' \
    -H "X-GitHub-Delivery: $delivery" -H "X-Hub-Signature-256: sha256=$sig" \
    --data-binary "$body" "$WEBHOOK_URL" || true
done
)";

const char* kManifest = R"(version: 1
defaults:
  repeats: 5
experiments:
  x:
    command: sh run.sh configs/x.txt {seed}
    watch: [configs/x.txt, run.sh]
  y:
    command: sh run.sh configs/y.txt {seed}
    watch: [configs/y.txt, run.sh]
)";

// accuracy = level + a per-seed offset (shared by both sides: what pairing
// cancels) + a per-config jitter (what it cannot).
const char* kRun = R"SH(read level salt < "$1"
v=$(python3 -c "import sys; s=int(sys.argv[2]); print(float(sys.argv[1]) + (s*37 % 11)/1000 + ((s*int(sys.argv[3])) % 5)/4000)" "$level" "$2" "$salt")
printf '{"name": "accuracy", "value": %s}\n' "$v" >> "$TRAINQ_METRICS_FILE"
)SH";

struct Forge {
  testing::TestHttpServer server{[](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, "{}", {}};
  }};
  // "state context: description" of every status posted for `sha`.
  std::vector<std::string> States(const std::string& sha) {
    std::vector<std::string> out;
    for (const auto& r : server.requests()) {
      if (r.target != "/repos/test/origin/statuses/" + sha) continue;
      auto j = json::parse(r.body);
      out.push_back(j["state"].get<std::string>() + " " + j["context"].get<std::string>() + ": " +
                    j["description"].get<std::string>());
    }
    return out;
  }
  std::string Last(const std::string& sha, const std::string& context) {
    std::string last;
    for (const auto& s : States(sha)) {
      if (s.find(" " + context + ": ") != std::string::npos) last = s;
    }
    return last;
  }
};

struct Setup {
  testing::TempDir tmp;
  std::string secret = "verdict-secret";
  std::string origin;
  std::string origin_url;
  std::string env;
  std::string base_url;
  int port = 0;
  GitCli work{tmp / "work"};
  Forge forge;
  Daemon daemon;
  std::string db;

  Setup() {
    REQUIRE(WriteFile(tmp / "secret", secret + "\n"));
    REQUIRE(WriteFile(tmp / "token", "forge-token\n"));
    origin = tmp / "origin.git";
    GitCli::InitBare(origin);
    REQUIRE(WriteFile(origin + "/hooks/post-receive", kHook));
    fs::permissions(origin + "/hooks/post-receive", fs::perms::owner_all);
    origin_url = "file://" + origin;
    work.Run("remote add origin " + ShellQuote(origin));
    port = testing::FreeLoopbackPort();
    base_url = "http://127.0.0.1:" + std::to_string(port);
    env = "WEBHOOK_SECRET=" + ShellQuote(secret) +
          " WEBHOOK_URL=" + ShellQuote(base_url + "/hooks/github") +
          " ORIGIN_URL=" + ShellQuote(origin_url) + " ";
    db = testing::StoreLocation(tmp, "trainq.db");
    REQUIRE(WriteFile(tmp / "server.yaml",
                      "repositories:\n"
                      "  - url: " + origin_url + "\n"
                      "    forge: github\n"
                      "    project: test/origin\n"
                      "    branches: [main]\n"
                      "    secret: {file: " + (tmp / "secret") + "}\n"
                      "    token: {file: " + (tmp / "token") + "}\n"
                      "    api_url: " + forge.server.url() + "\n"
                      "    status: true\n"));
  }

  void Serve() { REQUIRE(daemon.ServeWithConfig(db, tmp / "server.yaml", port, tmp.path())); }

  void Push() {
    std::string out;
    REQUIRE(testing::RunShell(env + "git -C " + ShellQuote(work.dir()) + " push origin main 2>&1",
                              &out) == 0);
    INFO(out);
    if (daemon.pid) CHECK(out.find("webhook: 202") != std::string::npos);
  }

  std::vector<BatchProgress> Batches() {
    auto store = Store::Open(db).value();
    return store.runs().Batches(false, 0).value();
  }

  int Trainq(const std::string& args, std::string* out) {
    return testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args,
                             out);
  }

  void Stop() {
    daemon.runner.KillGroup(daemon.pid, SIGTERM);
    auto exit = daemon.runner.Wait(daemon.pid);
    daemon.pid = 0;
    INFO("serve: " << exit.Describe() << "\n" << ReadFile(tmp / "serve.log").value_or(""));
    CHECK(exit.ok());
  }
};

TEST_CASE("e2e: a change is judged against the nearest equivalent ancestor, the status carries "
          "the verdict, gate decides",
          "[server][e2e][verdict]") {
  Setup s;
  s.Serve();
  std::string a = s.work.Commit({{"trainq.yaml", kManifest},
                                 {"run.sh", kRun},
                                 {"configs/x.txt", "0.70 1\n"},
                                 {"configs/y.txt", "0.50 1\n"}},
                                "A: first");
  s.Push();
  REQUIRE(testing::WaitFor(
      [&] { return s.forge.Last(a, "trainq/x").starts_with("success"); }, 60s));

  std::string b = s.work.Commit({{"README.md", "docs only\n"}}, "B: docs");
  s.Push();
  std::string c = s.work.Commit({{"configs/x.txt", "0.66 3\n"}}, "C: worse x");
  s.Push();
  INFO(ReadFile(s.tmp / "serve.log").value_or(""));
  REQUIRE(testing::WaitFor(
      [&] {
        auto last = s.forge.Last(c, "trainq/x");
        return last.starts_with("success") || last.starts_with("failure");
      },
      60s));
  // The verdict against A's runs, which were reused: nothing ran at B.
  std::string final_c = s.forge.Last(c, "trainq/x");
  CHECK(final_c.starts_with("failure trainq/x: accuracy 0.6"));
  CHECK(final_c.find(" vs " + a.substr(0, 7) + ": worse") != std::string::npos);
  CHECK(final_c.size() - std::string("failure trainq/x: ").size() <= 140);
  // As GitHub's API documents it: POST /repos/{owner}/{repo}/statuses/{sha},
  // a User-Agent (required), the token, the JSON body's fields.
  for (const auto& r : s.forge.server.requests()) {
    CHECK(r.method == "POST");
    CHECK(r.Header("User-Agent").starts_with("trainq/"));
    CHECK(r.Header("Authorization") == "Bearer forge-token");
    CHECK(r.Header("Accept") == "application/vnd.github+json");
    auto j = json::parse(r.body);
    CHECK(j.contains("state"));
    CHECK(j.contains("context"));
    CHECK(j["description"].get<std::string>().size() <= 140);
  }
  auto batches = s.Batches();
  int at_b = 0, at_a = 0;
  for (const auto& bt : batches) {
    if (bt.sha == b) ++at_b;
    if (bt.sha == a) ++at_a;
  }
  CHECK(at_b == 0);
  CHECK(at_a == 2);  // x and y of the first push, nothing queued there since
  CHECK(batches.size() == 3);

  std::string out;
  CHECK(s.Trainq("show " + c.substr(0, 8), &out) == 0);
  INFO(out);
  CHECK(out.find("1 commit before the base " + b.substr(0, 7) + " with the same inputs") !=
        std::string::npos);
  CHECK(out.find(": worse") != std::string::npos);

  // The gate against B (the README commit, which never ran x): regression.
  std::string repo = " --repo " + ShellQuote(s.work.dir());
  CHECK(s.Trainq("gate " + c + " --baseline " + b + repo + " -e x", &out) == 1);
  INFO(out);
  CHECK(out.find("✗  x: ") != std::string::npos);
  // HEAD and branch names resolve: D brings x back above A.
  std::string d = s.work.Commit({{"configs/x.txt", "0.74 2\n"}}, "D: better x");
  s.Push();
  CHECK(s.Trainq("gate HEAD --baseline HEAD~1 --wait 60s" + repo + " -e x", &out) == 0);
  INFO(out);
  CHECK(out.find("✓  x: ") != std::string::npos);
  CHECK(out.find(": better") != std::string::npos);
  REQUIRE(testing::WaitFor(
      [&] { return s.forge.Last(d, "trainq/x").starts_with("success"); }, 60s));
  CHECK(s.forge.Last(d, "trainq/x").find(" vs " + c.substr(0, 7) + ": better") !=
        std::string::npos);
  CHECK(s.Trainq("show HEAD" + repo, &out) == 0);
  CHECK(out.find("commit " + d.substr(0, 10)) != std::string::npos);
  s.Stop();
}

TEST_CASE("e2e: with no usable ancestor batch, a baseline batch is queued at the base with the "
          "same seeds and the status follows it",
          "[server][e2e][verdict]") {
  Setup s;
  // The first push happens before the daemon runs: nothing is recorded for A.
  std::string a = s.work.Commit({{"trainq.yaml", kManifest},
                                 {"run.sh", kRun},
                                 {"configs/x.txt", "0.70 1\n"},
                                 {"configs/y.txt", "0.50 1\n"}},
                                "A: first");
  s.Push();
  s.Serve();
  std::string c = s.work.Commit({{"configs/y.txt", "0.56 2\n"}}, "C: better y");
  s.Push();
  INFO(ReadFile(s.tmp / "serve.log").value_or(""));
  REQUIRE(testing::WaitFor(
      [&] { return s.forge.Last(c, "trainq/y").starts_with("success"); }, 60s));
  auto batches = s.Batches();
  REQUIRE(batches.size() == 2);
  const BatchProgress* head = nullptr;
  const BatchProgress* base = nullptr;
  for (const auto& bt : batches) (bt.sha == c ? head : base) = &bt;
  REQUIRE(head);
  REQUIRE(base);
  CHECK(base->sha == a);
  CHECK(base->experiment == "y");
  CHECK(head->baseline_batch_id == base->id);
  auto sorted = [](std::vector<std::int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  CHECK(sorted(head->seeds) == sorted(base->seeds));  // the same seeds: paired
  CHECK(base->values.size() == 5);
  // Pending while the baseline ran (unless it finished first), then the verdict.
  auto states = s.forge.States(c);
  CHECK(states.front() == "pending trainq/y: queued: 5 runs");
  CHECK(states.back().find(" vs " + a.substr(0, 7) + ": better") != std::string::npos);
  std::string out;
  CHECK(s.Trainq("gate " + c + " --baseline " + a + " --repo " + ShellQuote(s.work.dir()) +
                     " --json",
                 &out) == 0);
  INFO(out);
  auto j = json::parse(out);
  CHECK(j["decision"] == "pass");
  CHECK(j["experiments"][0]["comparison"]["paired"] == true);
  s.Stop();
}

}  // namespace
}  // namespace trainq
