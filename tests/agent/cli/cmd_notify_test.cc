// `trainq notify test` and `trainq notify status` through the real binary:
// a sample reaches a fake Slack (checked against Slack's payload rules) and
// a signature-checking receiver; a target that refuses, or a name not in the
// config, is an error that names it and never shows a Slack URL.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/store.h"
#include "tests/support/fake_notify.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

struct Out {
  int code = 0;
  std::string text;
};

Out Trainq(const std::string& args) {
  Out o;
  o.code = testing::RunShell(ShellQuote(TRAINQ_BINARY) + " " + args, &o.text);
  return o;
}

TEST_CASE("trainq notify test sends a sample to Slack and to a signed webhook", "[notify]") {
  testing::TempDir tmp;
  testing::FakeSlack slack;
  testing::SignedReceiver hook("k3y");
  testing::FakeSlack archived([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{410, "channel_is_archived", {}};
  });
  REQUIRE(WriteFile(tmp / "slack", slack.url()));
  REQUIRE(WriteFile(tmp / "archived", archived.url()));
  REQUIRE(WriteFile(tmp / "key", "k3y\n"));
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "public_url: https://trainq.example\nnotify:\n"
                    "  - name: chat\n    slack: {webhook_url: {file: " + (tmp / "slack") +
                        "}}\n    on: [worse]\n"
                        "  - name: ops\n    webhook: {url: " + hook.url() + ", secret: {file: " +
                        (tmp / "key") + "}}\n    on: [budget]\n"
                        "  - name: old\n    slack: {webhook_url: {file: " + (tmp / "archived") +
                        "}}\n    on: [worse]\n"));
  const std::string config = " --config " + ShellQuote(tmp / "server.yaml");

  auto chat = Trainq("notify test chat" + config);
  INFO(chat.text);
  CHECK(chat.code == 0);
  CHECK(chat.text.starts_with("sent a test message to chat (Slack webhook from file " +
                              (tmp / "slack") + "): accepted in "));
  REQUIRE(slack.texts().size() == 1);
  CHECK(slack.refusals().empty());
  CHECK(slack.texts()[0].ends_with("<https://trainq.example/|open in trainq>"));

  auto ops = Trainq("notify test ops" + config);
  CHECK(ops.code == 0);
  REQUIRE(hook.deliveries().size() == 1);
  CHECK(hook.unsigned_or_wrong() == 0);
  CHECK(nlohmann::json::parse(hook.deliveries()[0].body)["event"] == "test");

  auto old = Trainq("notify test old" + config);
  CHECK(old.code == 1);
  CHECK(old.text == "trainq: error: HTTP 410 from the Slack webhook of old: channel_is_archived\n");
  CHECK(old.text.find("XXXX") == std::string::npos);

  auto none = Trainq("notify test nope" + config);
  CHECK(none.code == 1);
  CHECK(none.text.find("no notify target named \"nope\" (it has chat, ops, old)") !=
        std::string::npos);
}

TEST_CASE("trainq notify status shows each target's deliveries and last error", "[notify]") {
  testing::TempDir tmp;
  const std::string db = tmp / "q.db";
  {
    auto store = Store::Open(db).value();
    auto& o = store.outbox();
    REQUIRE(o.Enqueue("notify:chat", "k1", "worse", "d1", "{}", 1'796'000'000'000));
    REQUIRE(o.MarkDelivered(o.Find("notify:chat", "k1").value()->id, 1'796'000'001'000));
    REQUIRE(o.Enqueue("notify:ops", "k2", "budget", "d2", "{}", 1'796'000'000'000));
    REQUIRE(o.MarkFailed(o.Find("notify:ops", "k2").value()->id, "HTTP 503 from the webhook ops",
                         1'796'000'100'000, false, 1'796'000'002'000));
  }
  auto out = Trainq("--db " + ShellQuote(db) + " notify status");
  CHECK(out.code == 0);
  CHECK(out.text ==
        "chat: 1 delivered, 0 pending, 0 given up\n"
        "  last delivery: 2026-11-30 00:53:21 UTC (worse)\n"
        "ops: 0 delivered, 1 pending, 0 given up\n"
        "  last delivery: never\n"
        "  last error:    2026-11-30 00:53:22 UTC: HTTP 503 from the webhook ops\n");
  auto json = Trainq("--db " + ShellQuote(db) + " notify status --json");
  CHECK(json.code == 0);
  auto j = nlohmann::json::parse(json.text);
  CHECK(j[1]["last_error"] == "HTTP 503 from the webhook ops");
}

}  // namespace
}  // namespace trainq
