// End to end, with the real binary, real git and signed GitHub webhooks to a
// running `trainq serve` (issue 43): a push to main that makes an experiment
// worse posts one Slack message with the dashboard link (checked against
// Slack's payload rules by the fake) and one signed webhook; serve killed
// and started again in the middle sends nothing twice.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "core/crypto.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/fake_notify.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::GitCli;

const char* kManifest = R"(version: 1
defaults:
  repeats: 4
experiments:
  lstm:
    command: sh run.sh {seed}
    watch: [run.sh, lr]
)";

// accuracy 0.<base><seed>1: base 9 gives 0.911, 0.921, ...; base 8 is worse.
const char* kRun = R"sh(printf '{"name": "accuracy", "value": 0.%s%s1}\n' "$(cat lr)" "$1" >> "$TRAINQ_METRICS_FILE"
)sh";

std::string PushPayload(const std::string& before, const std::string& after,
                        const std::string& origin_url) {
  json j = {{"ref", "refs/heads/main"}, {"before", before}, {"after", after}};
  j["repository"] = {
      {"clone_url", origin_url}, {"full_name", "acme/model"}, {"default_branch", "main"}};
  return j.dump();
}

TEST_CASE("e2e: a worse push posts one Slack message with its link and one signed webhook, "
          "nothing twice across a restart",
          "[e2e][notify]") {
  testing::TempDir tmp;
  testing::FakeSlack slack;
  testing::SignedReceiver hook("notify-e2e-key");
  const std::string secret = "notify-e2e-secret";
  REQUIRE(WriteFile(tmp / "secret", secret + "\n"));
  REQUIRE(WriteFile(tmp / "slack-url", slack.url() + "\n"));
  REQUIRE(WriteFile(tmp / "hook-key", "notify-e2e-key\n"));
  const std::string origin = tmp / "origin.git";
  GitCli::InitBare(origin);
  const std::string origin_url = "file://" + origin;
  GitCli work(tmp / "work");
  const std::string a =
      work.Commit({{"trainq.yaml", kManifest}, {"run.sh", kRun}, {"lr", "9\n"}}, "base");
  work.Run("remote add origin " + ShellQuote(origin));
  work.Run("push -q origin main");
  // clang-format off
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "public_url: https://trainq.example\n"
                    "repositories:\n"
                    "  - url: " + origin_url + "\n"
                    "    forge: github\n"
                    "    project: acme/model\n"
                    "    branches: [main]\n"
                    "    secret: {file: " + (tmp / "secret") + "}\n"
                    "notify:\n"
                    "  - name: ml-alerts\n"
                    "    slack: {webhook_url: {file: " + (tmp / "slack-url") + "}}\n"
                    "    on: [worse, dead_runs]\n"
                    "    repositories: [acme/model]\n"
                    "    branches: [main]\n"
                    "  - name: ops\n"
                    "    webhook: {url: " + hook.url() + ", secret: {file: " + (tmp / "hook-key") + "}}\n"
                    "    on: [worse]\n"
                    "    branches: [release]\n"));  // filtered out: a push to main
  // clang-format on
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  const int port = testing::FreeLoopbackPort();
  const std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  CurlHttpClient http;
  int deliveries = 0;
  auto send = [&](const std::string& body) {
    HttpHeaders h = {{"X-GitHub-Event", "push"},
                     {"X-GitHub-Delivery", "d-" + std::to_string(++deliveries)},
                     {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)}};
    auto r = http.Send({"POST", base_url + "/hooks/github", h, body, 5000});
    REQUIRE(r);
    CHECK(r->status == 202);
  };
  auto ended = [&](const std::string& sha) {
    auto store = Store::Open(db).value();
    auto batches = store.runs().BatchesForCommit(sha).value();
    if (batches.empty()) return false;
    for (const auto& b : batches) {
      if (b.active()) return false;
    }
    return true;
  };
  auto log = [&] { return ReadFile(tmp / "serve.log").value_or(""); };

  auto daemon = std::make_unique<testing::Daemon>();
  REQUIRE(daemon->ServeWithConfig(db, tmp / "server.yaml", port, tmp.path()));
  send(PushPayload(std::string(kZeroSha), a, origin_url));
  if (!testing::WaitFor([&] { return ended(a); }, 60s)) FAIL(log());

  const std::string b = work.Commit({{"lr", "8\n"}}, "lstm: a smaller learning rate");
  work.Run("push -q origin main");
  send(PushPayload(a, b, origin_url));
  if (!testing::WaitFor([&] { return slack.texts().size() == 1; }, 60s)) FAIL(log());
  auto texts = slack.texts();
  CHECK(slack.refusals().empty());
  CHECK(texts[0].starts_with(":chart_with_downwards_trend: *worse* acme/model@main " +
                             ShortSha(b) + " lstm: worse than " + ShortSha(a) + ": -0.1000"));
  CHECK(texts[0].ends_with("<https://trainq.example/commit/" + b + "|open in trainq>"));

  // serve killed hard and started again, once the delivery is recorded (a
  // kill between Slack's answer and that record sends the message again
  // after the restart: Slack has no delivery id to drop it by; a webhook
  // receiver has X-Trainq-Delivery): the scan from the start of history
  // finds the event in the outbox and sends nothing.
  REQUIRE(testing::WaitFor(
      [&] {
        auto store = Store::Open(db).value();
        auto sums = store.outbox().Summaries("notify:").value();
        return sums.size() == 1 && sums[0].delivered == 1;
      },
      30s));
  daemon->runner.KillGroup(daemon->pid, SIGKILL);
  daemon->runner.Wait(daemon->pid);
  daemon->pid = 0;
  daemon = std::make_unique<testing::Daemon>();
  REQUIRE(daemon->ServeWithConfig(db, tmp / "server.yaml", port, tmp.path()));
  {
    auto store = Store::Open(db).value();
    REQUIRE(store.outbox().SetMark("notify:cursor", "0:0", 0));  // rescan all history
  }
  REQUIRE(testing::WaitFor(
      [&] {
        auto store = Store::Open(db).value();
        auto m = store.outbox().Mark("notify:cursor").value();
        return m && *m != "0:0";
      },
      30s));
  INFO(log());
  CHECK(slack.texts().size() == 1);
  CHECK(hook.requests() == 0);  // ops asked for release only
  auto store = Store::Open(db).value();
  auto sums = store.outbox().Summaries("notify:").value();
  REQUIRE(sums.size() == 1);
  CHECK(sums[0].target == "notify:ml-alerts");
  CHECK(sums[0].delivered == 1);
  CHECK(sums[0].pending == 0);
}

}  // namespace
}  // namespace trainq
