// End to end, with the real binary and real git: a bare repository whose
// post-receive hook sends a signed GitHub webhook with curl to a running
// `trainq serve`; a `git push` of a commit that touches one experiment's
// config queues exactly that experiment, its runs execute from the mirror,
// and a fake forge on loopback receives `pending`, then the spread.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
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
using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::GitCli;

// GitHub's push webhook for each updated ref, HMAC-signed with $WEBHOOK_SECRET.
const char* kHook = R"(#!/bin/sh
while read old new ref; do
  body=$(printf '{"ref":"%s","before":"%s","after":"%s","repository":{"clone_url":"%s","full_name":"test/origin","default_branch":"main"}}' "$ref" "$old" "$new" "$ORIGIN_URL")
  sig=$(printf '%s' "$body" | python3 -c 'import hashlib, hmac, os, sys; print(hmac.new(os.environ["WEBHOOK_SECRET"].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())')
  delivery=$(python3 -c 'import uuid; print(uuid.uuid4())')
  printf '%s\n' "$body" > "$GIT_DIR/last-body"
  printf '%s\n' "$delivery" > "$GIT_DIR/last-delivery"
  curl -sS -m 10 -o /dev/null -w 'webhook: %{http_code}\n' -X POST \
    -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' \
    -H "X-GitHub-Delivery: $delivery" -H "X-Hub-Signature-256: sha256=$sig" \
    --data-binary "$body" "$WEBHOOK_URL" || true
done
)";

const char* kManifest = R"(version: 1
defaults:
  repeats: 3
experiments:
  a:
    command: sh run.sh 0.5{seed}
    watch: [configs/a.yaml, run.sh]
  b:
    command: sh run.sh 0.6{seed}
    watch: [configs/b.yaml, run.sh]
)";

const char* kRun = R"(printf '{"name": "accuracy", "value": %s}\n' "$1" >> "$TRAINQ_METRICS_FILE"
)";

using testing::Daemon;

TEST_CASE("e2e: git push -> signed webhook -> exactly the touched experiment runs -> forge "
          "gets pending then the spread",
          "[server][e2e]") {
  testing::TempDir tmp;
  const std::string secret = "e2e-webhook-secret";
  REQUIRE(WriteFile(tmp / "secret", secret + "\n"));
  REQUIRE(WriteFile(tmp / "token", "e2e-forge-token\n"));

  // The forge's side: a bare repository with the hook, and a fake status API.
  std::string origin = tmp / "origin.git";
  GitCli::InitBare(origin);
  REQUIRE(WriteFile(origin + "/hooks/post-receive", kHook));
  fs::permissions(origin + "/hooks/post-receive", fs::perms::owner_all);
  testing::TestHttpServer forge([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, "{}", {}};
  });

  // The first push happens before the daemon runs: the hook's curl fails, harmlessly.
  GitCli work(tmp / "work");
  work.Commit({{"trainq.yaml", kManifest},
               {"run.sh", kRun},
               {"configs/a.yaml", "lr: 1\n"},
               {"configs/b.yaml", "lr: 1\n"}},
              "base");
  std::string origin_url = "file://" + origin;
  work.Run("remote add origin " + ShellQuote(origin));
  int port = testing::FreeLoopbackPort();
  std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  std::string env = "WEBHOOK_SECRET=" + ShellQuote(secret) +
                    " WEBHOOK_URL=" + ShellQuote(base_url + "/hooks/github") +
                    " ORIGIN_URL=" + ShellQuote(origin_url) + " ";
  std::string out;
  REQUIRE(testing::RunShell(env + "git -C " + ShellQuote(work.dir()) + " push -q origin main",
                            &out) == 0);

  REQUIRE(WriteFile(tmp / "server.yaml",
                    "repositories:\n"
                    "  - url: " + origin_url + "\n"
                    "    forge: github\n"
                    "    project: test/origin\n"
                    "    branches: [main]\n"
                    "    secret: {file: " + (tmp / "secret") + "}\n"
                    "    token: {file: " + (tmp / "token") + "}\n"
                    "    api_url: " + forge.url() + "\n"
                    "    status: true\n"
                    "read_token: {file: " + (tmp / "read-token") + "}\n"));
  REQUIRE(WriteFile(tmp / "read-token", "e2e-read-token\n"));
  std::string db = testing::StoreLocation(tmp, "trainq.db");
  Daemon daemon;
  REQUIRE(daemon.ServeWithConfig(db, tmp / "server.yaml", port, tmp.path()));
  CurlHttpClient http;

  // The push that matters: only configs/b.yaml changes.
  std::string sha = work.Commit({{"configs/b.yaml", "lr: 2\n"}}, "tune b");
  auto pushed_at = std::chrono::steady_clock::now();
  REQUIRE(testing::RunShell(env + "git -C " + ShellQuote(work.dir()) + " push origin main 2>&1",
                            &out) == 0);
  INFO("git push:\n" << out);
  CHECK(out.find("webhook: 202") != std::string::npos);

  auto store = Store::Open(db).value();
  auto batches_of = [&](const std::string& commit) {
    std::vector<BatchProgress> out;
    auto all = store.runs().Batches(false, 0).value();
    for (auto& b : all) {
      if (b.sha == commit) out.push_back(std::move(b));
    }
    return out;
  };
  REQUIRE(testing::WaitFor([&] { return !batches_of(sha).empty(); }, 20s));
  auto queued_after = std::chrono::steady_clock::now() - pushed_at;
  WARN("push to batch queued: "
       << std::chrono::duration_cast<std::chrono::milliseconds>(queued_after).count()
       << " ms (git push and its hook included)");
  auto batches = batches_of(sha);
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].experiment == "b");
  CHECK(batches[0].reason == "github push to main: configs/b.yaml matches watch 'configs/b.yaml'");
  // Nothing else was queued but b's baseline: the base commit never ran b (its
  // push came before the daemon), so b is queued there with the same seeds.
  REQUIRE(testing::WaitFor([&] { return store.runs().Batches(false, 0).value().size() == 2; }, 20s));
  auto all = store.runs().Batches(false, 0).value();  // newest first
  CHECK(all[0].experiment == "b");
  CHECK(all[0].sha == work.Run("rev-parse HEAD~1"));

  // The runs execute from the mirror and finish; the forge sees pending, then the spread.
  auto forge_states = [&] {
    std::vector<std::string> states;
    for (const auto& r : forge.requests()) {
      if (r.target != "/repos/test/origin/statuses/" + sha) continue;
      auto j = json::parse(r.body);
      states.push_back(j["state"].get<std::string>() + " " + j["context"].get<std::string>() +
                       ": " + j["description"].get<std::string>());
    }
    return states;
  };
  const std::string final_status =
      "success trainq/b: accuracy 0.620 ± 0.010 (n=3); +0.000 [+0.000, +0.000] vs " +
      all[0].sha.substr(0, 7) +
      ": no detectable change";
  REQUIRE(testing::WaitFor(
      [&] {
        auto st = forge_states();
        return !st.empty() && st.back().starts_with("success");
      },
      30s));
  CHECK(forge_states().back() == final_status);
  CHECK(store.runs().Batch(batches[0].id).value()->baseline_batch_id == all[0].id);
  INFO(ReadFile(tmp / "serve.log").value_or(""));
  // pending, perhaps "waiting for the baseline" while its runs went on, then the verdict.
  CHECK(forge_states().front() == "pending trainq/b: queued: 3 runs");
  CHECK(forge_states().size() <= 3);
  CHECK(forge.requests()[0].Header("Authorization") == "Bearer e2e-forge-token");
  auto runs = store.runs().Runs(batches[0].id, std::nullopt, 0).value();
  REQUIRE(runs.size() == 3);
  for (const auto& r : runs) CHECK(r.state == RunState::kSucceeded);
  // Checked out by the worker machine that ran them (the local provider's).
  bool checked_out = false;
  for (const auto& m : fs::directory_iterator(tmp.path() / "trainq-data/machines")) {
    if (fs::exists(m.path() / "worktrees" / sha / "configs/b.yaml")) checked_out = true;
  }
  CHECK(checked_out);

  // The same delivery again (the forge's "redeliver"): 200 duplicate, nothing new.
  std::string body = std::string(Trim(ReadFile(origin + "/last-body").value_or("")));
  std::string delivery = std::string(Trim(ReadFile(origin + "/last-delivery").value_or("")));
  auto again = http.Send({"POST",
                          base_url + "/hooks/github",
                          {{"X-GitHub-Event", "push"},
                           {"X-GitHub-Delivery", delivery},
                           {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)}},
                          body,
                          5000});
  REQUIRE(again);
  CHECK(again->status == 200);
  CHECK(json::parse(again->body)["result"] == "duplicate");
  // A forged one: 401.
  auto forged = http.Send({"POST", base_url + "/hooks/github",
                           {{"X-GitHub-Event", "push"}, {"X-GitHub-Delivery", "forged"},
                            {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex("guess", body)}},
                           body, 5000});
  REQUIRE(forged);
  CHECK(forged->status == 401);
  CHECK(store.pushes().RecentPushes(10).value().size() == 1);

  // `trainq status --server` reads the API; `trainq show` explains the batch.
  std::string status;
  // Without the read token the server refuses, and says which token.
  std::string refused;
  CHECK(testing::RunShell("env -u TRAINQ_READ_TOKEN " + ShellQuote(TRAINQ_BINARY) +
                              " status --server " + base_url + " 2>&1",
                          &refused) != 0);
  CHECK(refused.find("read token") != std::string::npos);
  REQUIRE(testing::RunShell("TRAINQ_READ_TOKEN=e2e-read-token " + ShellQuote(TRAINQ_BINARY) +
                                " status --server " + base_url,
                            &status) == 0);
  INFO(status);
  CHECK(status.find("3/3 done, 0 failed") != std::string::npos);
  CHECK(status.find("pushes:") != std::string::npos);
  std::string show;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " show " +
                                sha.substr(0, 8),
                            &show) == 0);
  INFO(show);
  CHECK(show.find("why:    github push to main: configs/b.yaml matches watch 'configs/b.yaml'") !=
        std::string::npos);
  CHECK(show.find("status: trainq/b success - accuracy 0.620 ± 0.010 (n=3); ") != std::string::npos);

  // The secret and the token never reach the log.
  std::string log = ReadFile(tmp / "serve.log").value_or("");
  CHECK(log.find(secret) == std::string::npos);
  CHECK(log.find("e2e-forge-token") == std::string::npos);

  daemon.runner.KillGroup(daemon.pid, SIGTERM);
  auto exit = daemon.runner.Wait(daemon.pid);
  daemon.pid = 0;
  INFO("serve: " << exit.Describe() << "\n" << ReadFile(tmp / "serve.log").value_or(""));
  CHECK(exit.ok());
}

}  // namespace
}  // namespace trainq
