// End to end (issue 38): a push sent while `trainq serve` is down is refused
// (the forge's delivery fails with "connection refused" and is not sent
// again); the restarted serve fetches its watched branches, finds the head no
// webhook brought and processes it, once, across later restarts too. A gate
// on a commit the server's mirror does not have says so in trainq's words.
// Real git (a bare origin whose post-receive hook sends signed GitHub
// webhooks), the real `trainq serve` with local workers.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>

#include "core/process.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

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
  repeats: 2
experiments:
  x:
    command: sh run.sh {seed}
    watch: [configs/x.txt, run.sh]
)";

const char* kRun = R"(level=$(cat configs/x.txt)
printf '{"name": "accuracy", "value": %s%s}\n' "$level" "$1" >> "$TRAINQ_METRICS_FILE"
)";

struct Setup {
  testing::TempDir tmp;
  std::string origin = tmp / "origin.git";
  std::string origin_url = "file://" + origin;
  int port = testing::FreeLoopbackPort();
  std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  std::string env;
  GitCli work{tmp / "work"};
  testing::Daemon daemon;
  std::string db = testing::StoreLocation(tmp, "trainq.db");

  Setup() {
    REQUIRE(WriteFile(tmp / "secret", "catch-up-secret\n"));
    REQUIRE(WriteFile(tmp / "read.token", "catch-up-read-token\n"));
    GitCli::InitBare(origin);
    REQUIRE(WriteFile(origin + "/hooks/post-receive", kHook));
    fs::permissions(origin + "/hooks/post-receive", fs::perms::owner_all);
    work.Run("remote add origin " + ShellQuote(origin));
    env = "WEBHOOK_SECRET=catch-up-secret WEBHOOK_URL=" + ShellQuote(base_url + "/hooks/github") +
          " ORIGIN_URL=" + ShellQuote(origin_url) + " ";
    // catch_up: 10s looks again a second after it sees a moved head.
    REQUIRE(WriteFile(tmp / "server.yaml",
                      "repositories:\n"
                      "  - url: " + origin_url + "\n"
                      "    forge: github\n"
                      "    project: test/origin\n"
                      "    branches: [main]\n"
                      "    secret: {file: " + (tmp / "secret") + "}\n"
                      "    catch_up: 10s\n"
                      "read_token: {file: " + (tmp / "read.token") + "}\n"));
  }

  void Serve() { REQUIRE(daemon.ServeWithConfig(db, tmp / "server.yaml", port, tmp.path())); }

  void Stop() {
    daemon.runner.KillGroup(daemon.pid, SIGTERM);
    auto exit = daemon.runner.Wait(daemon.pid);
    daemon.pid = 0;
    INFO("serve: " << exit.Describe() << "\n" << Log());
    CHECK(exit.ok());
  }

  std::string Push() {
    std::string out;
    REQUIRE(testing::RunShell(env + "git -C " + ShellQuote(work.dir()) + " push origin main 2>&1",
                              &out) == 0);
    return out;
  }

  std::string Log() { return ReadFile(tmp / "serve.log").value_or(""); }

  std::vector<Pushes::Push> PushesOf(const std::string& sha) {
    auto store = Store::Open(db).value();
    return store.pushes().PushesForCommit(sha).value();
  }

  int BatchesAt(const std::string& sha) {
    auto store = Store::Open(db).value();
    int n = 0;
    auto batches = store.runs().BatchesForCommit(sha).value();
    for (const auto& b : batches) n += b.sha == sha;
    return n;
  }

  bool Done(const std::string& sha) {
    auto pushes = PushesOf(sha);
    return pushes.size() == 1 && pushes[0].state == "done";
  }
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("e2e: a push sent while serve is down is processed after the restart, exactly once",
          "[server][e2e][catch_up]") {
  Setup s;
  s.Serve();
  std::string a = s.work.Commit(
      {{"trainq.yaml", kManifest}, {"run.sh", kRun}, {"configs/x.txt", "0.7"}}, "A: first");
  CHECK(s.Push().find("webhook: 202") != std::string::npos);
  REQUIRE(testing::WaitFor([&] { return s.Done(a); }, 60s));
  s.Stop();

  // serve is down: the forge's delivery is refused, and never sent again.
  std::string b = s.work.Commit({{"configs/x.txt", "0.8"}}, "B: while serve was down");
  std::string refused = s.Push();
  INFO(refused);
  CHECK(refused.find("webhook: 000") != std::string::npos);
  CHECK(s.PushesOf(b).empty());

  s.Serve();
  INFO(s.Log());
  REQUIRE(testing::WaitFor([&] { return s.Done(b); }, 60s));
  auto pushes = s.PushesOf(b);
  CHECK(pushes[0].source == "catch-up");
  CHECK(pushes[0].ref == "refs/heads/main");
  CHECK(pushes[0].before_sha == a);
  CHECK(s.BatchesAt(b) == 1);
  CHECK(s.Log().find("no webhook brought it") != std::string::npos);

  // A gate on a commit the server's mirror lacks says what is missing.
  std::string c = s.work.Commit({{"configs/x.txt", "0.9"}}, "C: never pushed");
  std::string out;
  int code = testing::RunShell(std::string(TRAINQ_BINARY) + " gate " + c + " --baseline " + a +
                                   " --repo test/origin --server " + s.base_url +
                                   " --token-file " + ShellQuote(s.tmp / "read.token") + " 2>&1",
                               &out);
  INFO(out);
  CHECK(code == 3);
  CHECK(out.find("commit " + c.substr(0, 7)) != std::string::npos);
  CHECK(out.find("is not in the mirror of test/origin: serve has not seen a push of it yet") !=
        std::string::npos);
  CHECK(out.find("object not found") == std::string::npos);
  CHECK(out.find("merge base") == std::string::npos);

  // Another restart finds nothing missed: B stays one push, one batch.
  s.Stop();
  const size_t looks = Count(s.Log(), ": first look at ");
  s.Serve();
  REQUIRE(testing::WaitFor([&] { return Count(s.Log(), ": first look at ") > looks; }, 30s));
  CHECK(s.Log().rfind("0 moved with no webhook recorded") > s.Log().rfind(": first look at "));
  // The push after the restart goes on as usual, and B is not queued again.
  s.work.Commit({{"README", "docs\n"}}, "D: docs");
  CHECK(s.Push().find("webhook: 202") != std::string::npos);
  CHECK(s.PushesOf(b).size() == 1);
  CHECK(s.BatchesAt(b) == 1);
  s.Stop();
}

}  // namespace
}  // namespace trainq
