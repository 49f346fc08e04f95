// Notifications (issue 43) against receivers on loopback that speak the real
// contracts: a fake Slack incoming webhook checking Slack's payload rules, a
// receiver that verifies the HMAC signature with OpenSSL; events found in a
// real store, one message per event also after a restart; a down, a slow and
// a 500-then-200 target each end in exactly one delivery.
#include "agent/triggers/notify.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "agent/triggers/server_config.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/fake_notify.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

const std::string kBase = "1111111111111111111111111111111111111111";
const std::string kHead = "2222222222222222222222222222222222222222";

ServerConfig Parse(const std::string& yaml) {
  auto c = ParseServerConfig(yaml, "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  return *c;
}

std::string ParseError(const std::string& yaml) {
  auto c = ParseServerConfig(yaml, "server.yaml");
  REQUIRE_FALSE(c);
  return c.error().message;
}

struct World {
  testing::TempDir tmp;
  FakeClock clock;
  Store store = Store::Open(tmp / "q.db").value();
  ServerConfig config;

  // `targets`: the `notify:` list's items, indented by 2.
  void Configure(const std::string& targets) {
    REQUIRE(WriteFile(tmp / "secret", "hook-key"));
    config = Parse("public_url: https://trainq.example\nnotify:\n" + targets);
  }
  std::string Secret() const { return "{file: " + (tmp / "secret") + "}"; }
  std::string SlackUrlFile(const std::string& url) {
    REQUIRE(WriteFile(tmp / "slack-url", url + "\n"));
    return "{file: " + (tmp / "slack-url") + "}";
  }

  // A batch of `exp` at `sha` (parent `parent`) with these values, all runs
  // ended at the current time.
  std::int64_t Batch(const std::string& sha, const std::string& parent, const std::string& exp,
                     const std::vector<double>& values, int dead = 0,
                     const std::string& spec_json = "") {
    BatchSpec spec;
    spec.experiment = exp;
    if (!spec_json.empty()) spec.spec_json = spec_json;
    spec.command = "true";
    spec.repeats = static_cast<int>(values.size()) + dead;
    spec.max_attempts = 1;
    auto r = store.runs().Submit("/srv/model", {sha, parent, "s", "me", 0}, {spec}, clock.Now());
    REQUIRE(r);
    const std::int64_t batch = r->front().batch_id;
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 100).value();
    REQUIRE(leased.size() == values.size() + dead);
    for (size_t i = 0; i < leased.size(); ++i) {
      if (i < values.size()) {
        REQUIRE(store.runs().Complete(leased[i].run_id, leased[i].token, clock.Now(), values[i]));
      } else {
        REQUIRE(store.runs().FailRun(leased[i].run_id, leased[i].token, clock.Now(),
                                     "exit code 1: CUDA out of memory", 1, false));
      }
    }
    return batch;
  }
};

TEST_CASE("notify: server.yaml's notify list is read and checked", "[notify]") {
  World w;
  w.Configure("  - name: ml-alerts\n    slack: {webhook_url: " +
              w.SlackUrlFile("https://hooks.slack.com/services/T1/B2/c3") +
              "}\n    on: [worse, drift, dead_runs]\n    repositories: [acme/model]\n"
              "    branches: [main]\n  - name: ops\n    webhook: {url: https://ops.example/hook, "
              "secret: " + w.Secret() + "}\n    on: [pool_failing, budget, queue_stuck]\n"
              "    rate_limit: 5\n");
  REQUIRE(w.config.notify.size() == 2);
  const auto& slack = w.config.notify[0];
  CHECK(slack.kind == NotifyTarget::Kind::kSlack);
  CHECK(slack.slack_url.value == "https://hooks.slack.com/services/T1/B2/c3");
  CHECK(slack.Wants("worse"));
  CHECK_FALSE(slack.Wants("budget"));
  CHECK(slack.Matches("acme/model", "https://github.com/acme/model.git", "main", "lstm"));
  CHECK_FALSE(slack.Matches("acme/model", "", "feature", "lstm"));
  CHECK_FALSE(slack.Matches("acme/other", "", "main", "lstm"));
  const auto& ops = w.config.notify[1];
  CHECK(ops.secret.value == "hook-key");
  CHECK(ops.rate_limit == 5);
  CHECK(ops.Matches("", "", "", ""));  // a pool's event: no filters set

  CHECK(ParseError("notify:\n  - name: a\n    webhook: {url: https://x.example, secret: " +
                   w.Secret() + "}\n    on: [worse, lunch]\n") ==
        "server.yaml:4: notify[0].on: unknown event \"lunch\" (expected worse, drift, "
        "not_reproducible, dead_runs, pool_failing, budget or queue_stuck)");
  CHECK(ParseError("notify:\n  - name: a\n    webhook: {url: https://x.example}\n"
                   "    on: [worse]\n")
            .starts_with("server.yaml:3: notify[0].webhook.secret: missing"));
  CHECK(ParseError("notify:\n  - name: a\n    webhook: {url: ftp://x, secret: " + w.Secret() +
                   "}\n    on: [worse]\n")
            .starts_with("server.yaml:3: notify[0].webhook.url: expected an http:// or https:// URL"));
  CHECK(ParseError("notify:\n  - name: a\n    on: [worse]\n") ==
        "server.yaml:2: notify[0]: expected exactly one of `slack:` and `webhook:`");
  // A Slack URL is a secret: never written in the file, never in a message.
  CHECK(ParseError("notify:\n  - name: a\n    slack: {webhook_url: https://hooks.slack.com/x}\n"
                   "    on: [worse]\n")
            .find("notify[0].slack.webhook_url") != std::string::npos);
  auto bad_url = ParseError("notify:\n  - name: a\n    slack: {webhook_url: " +
                            w.SlackUrlFile("hooks.slack.com/services/SECRET") + "}\n    on: [worse]\n");
  CHECK(bad_url.find("SECRET") == std::string::npos);
}

TEST_CASE("notify: a worse verdict posts one Slack message with its link, also after a restart",
          "[notify]") {
  World w;
  testing::FakeSlack slack;
  w.Configure("  - name: ml-alerts\n    slack: {webhook_url: " + w.SlackUrlFile(slack.url()) +
              "}\n    on: [worse, dead_runs]\n");
  {
    NotifyScanner first(w.store, w.config, w.clock);
    REQUIRE(first.Step().value() == 0);  // the cursor starts now
  }
  w.clock.Advance(1'000);
  w.Batch(kBase, "", "lstm", {0.90, 0.91, 0.905, 0.902, 0.908});
  w.clock.Advance(1'000);
  const auto head = w.Batch(kHead, kBase, "lstm", {0.80, 0.812, 0.805, 0.79, 0.801}, /*dead=*/1);
  w.clock.Advance(1'000);
  {
    NotifyScanner scanner(w.store, w.config, w.clock);
    CHECK(scanner.Step().value() == 2);  // worse, and the dead run
    CurlHttpClient http;
    NotifySender sender(w.store, w.config, http, w.clock);
    CHECK(sender.Step().value() == 2);
  }
  auto texts = slack.texts();
  CHECK(slack.refusals().empty());
  REQUIRE(texts.size() == 2);
  std::string worse = texts[0].find("*worse*") != std::string::npos ? texts[0] : texts[1];
  CHECK(worse.find("model " + ShortSha(kHead) + " lstm: worse than " + ShortSha(kBase) + ": -0.1034 (95% CI") !=
        std::string::npos);
  CHECK(worse.find("<https://trainq.example/commit/" + kHead + "|open in trainq>") !=
        std::string::npos);
  std::string dead = texts[0].find("*dead_runs*") != std::string::npos ? texts[0] : texts[1];
  CHECK(dead.find("1 of 6 runs ended dead (seed 6: exit code 1: CUDA out of memory)") !=
        std::string::npos);

  // A restart: a new scanner from the start of history, a new sender.
  REQUIRE(w.store.outbox().ClearMark("notify:cursor"));
  REQUIRE(w.store.outbox().SetMark("notify:cursor", "0:0", w.clock.Now()));
  CurlHttpClient http;
  NotifyScanner again(w.store, w.config, w.clock);
  CHECK(again.Step().value() == 0);
  NotifySender sender(w.store, w.config, http, w.clock);
  CHECK(sender.Step().value() == 0);
  CHECK(slack.texts().size() == 2);
  auto row = w.store.outbox().Find("notify:ml-alerts", "worse:batch:" + std::to_string(head));
  REQUIRE(row.value());
  CHECK((*row)->state == "delivered");
}

TEST_CASE("notify: noise drift and a failed determinism check each post one message", "[notify]") {
  World w;
  testing::FakeSlack slack;
  w.Configure("  - name: ml-alerts\n    slack: {webhook_url: " + w.SlackUrlFile(slack.url()) +
              "}\n    on: [drift, not_reproducible]\n");
  {
    NotifyScanner first(w.store, w.config, w.clock);
    REQUIRE(first.Step().value() == 0);
  }
  // The same inputs at three commits: the third's numbers moved (drift).
  const std::string same_inputs = R"({"inputs": "sha256:data-and-code"})";
  const std::string kFirst(40, '0');
  w.clock.Advance(1'000);
  w.Batch(kFirst, "", "lstm", {0.901, 0.902, 0.903, 0.904, 0.905}, 0, same_inputs);
  w.Batch(kBase, kFirst, "lstm", {0.901, 0.902, 0.903, 0.904, 0.905}, 0, same_inputs);
  const auto head = w.Batch(kHead, kBase, "lstm", {0.950, 0.951, 0.952, 0.953, 0.954}, 0, same_inputs);
  // Its determinism companion ran seed 1 again and printed another number.
  w.Batch(kHead, kBase, "lstm@repro", {0.9513});
  w.clock.Advance(1'000);
  CurlHttpClient http;
  NotifyScanner scanner(w.store, w.config, w.clock);
  CHECK(scanner.Step().value() == 2);
  NotifySender sender(w.store, w.config, http, w.clock);
  CHECK(sender.Step().value() == 2);
  auto texts = slack.texts();
  CHECK(slack.refusals().empty());
  REQUIRE(texts.size() == 2);
  std::string drift = texts[0].find("*drift*") != std::string::npos ? texts[0] : texts[1];
  std::string repro = texts[0].find("*not_reproducible*") != std::string::npos ? texts[0] : texts[1];
  CHECK(drift.find("*drift*") != std::string::npos);
  CHECK(drift.find(ShortSha(kHead) + " lstm: ") != std::string::npos);
  CHECK(repro.find("*not_reproducible*") != std::string::npos);
  CHECK(repro.find("seed 1") != std::string::npos);
  CHECK(w.store.outbox().Find("notify:ml-alerts", "drift:batch:" + std::to_string(head)).value());
  CHECK(w.store.outbox()
            .Find("notify:ml-alerts", "not_reproducible:batch:" + std::to_string(head))
            .value());
  // Scanned again (a restart from the start of history): nothing new.
  REQUIRE(w.store.outbox().SetMark("notify:cursor", "0:0", w.clock.Now()));
  NotifyScanner again(w.store, w.config, w.clock);
  CHECK(again.Step().value() == 0);
  CHECK(sender.Step().value() == 0);
  CHECK(slack.texts().size() == 2);
}

TEST_CASE("notify: Slack's rules are the fake's: escaped markup passes, raw markup is refused",
          "[notify]") {
  json ev = {{"event", "worse"}, {"summary", "a <b> & c"}, {"url", "https://t.example/commit/ab"}};
  testing::TestHttpRequest r;
  r.method = "POST";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = json{{"text", SlackText(ev)}}.dump();
  CHECK(testing::SlackPayloadProblem(r) == "");
  CHECK(SlackText(ev) ==
        ":chart_with_downwards_trend: *worse* a &lt;b&gt; &amp; c <https://t.example/commit/ab|open in trainq>");
  // A long summary is cut before escaping: no entity or character split.
  ev["summary"] = std::string(1'999, 'x') + "é&<" + std::string(5'000, 'y');
  r.body = json{{"text", SlackText(ev)}}.dump();
  CHECK(testing::SlackPayloadProblem(r) == "");
  CHECK(SlackText(ev).find(std::string(1'999, 'x') + "...") != std::string::npos);
  r.body = R"({"text": "a <b> & c"})";
  CHECK(testing::SlackPayloadProblem(r).starts_with("invalid_payload"));
  r.body = R"({"txt": "x"})";
  CHECK(testing::SlackPayloadProblem(r) == "invalid_payload: unknown field txt");
  r.body = R"({"text": ""})";
  CHECK(testing::SlackPayloadProblem(r) == "no_text");
}

TEST_CASE("notify: a failing pool posts one signed webhook with the documented body",
          "[notify]") {
  World w;
  testing::SignedReceiver hook("hook-key");
  w.Configure("  - name: ops\n    webhook: {url: " + hook.url() + ", secret: " + w.Secret() +
              "}\n    on: [pool_failing, budget]\n");
  Machines::PoolStateRow p;
  p.pool = "gpu";
  p.failed_boots = 3;
  p.failing = true;
  p.boot_error = "InsufficientInstanceCapacity";
  REQUIRE(w.store.machines().SetPoolBoots(p, w.clock.Now()));
  CurlHttpClient http;
  for (int pass = 0; pass < 3; ++pass) {  // the condition lasts: one message
    NotifyScanner scanner(w.store, w.config, w.clock);
    NotifySender sender(w.store, w.config, http, w.clock);
    REQUIRE(scanner.Step());
    REQUIRE(sender.Step());
    w.clock.Advance(10'000);
  }
  auto got = hook.deliveries();
  CHECK(hook.unsigned_or_wrong() == 0);
  REQUIRE(got.size() == 1);
  CHECK(got[0].event == "pool_failing");
  auto body = json::parse(got[0].body);
  CHECK(body["schema"] == "trainq.notification/1");
  CHECK(body["event"] == "pool_failing");
  CHECK(body["delivery"] == got[0].id);
  CHECK(got[0].id.size() == 32);
  CHECK(body["pool"] == "gpu");
  CHECK(body["url"] == "https://trainq.example/machines");
  CHECK(body["summary"] ==
        "pool gpu is failing: 3 boots failed in a row; last: InsufficientInstanceCapacity");
  CHECK(body["details"]["failed_boots"] == 3);

  // It ends, and comes back: a second message.
  p.failing = false;
  p.failed_boots = 0;
  REQUIRE(w.store.machines().SetPoolBoots(p, w.clock.Now()));
  NotifyScanner scanner(w.store, w.config, w.clock);
  NotifySender sender(w.store, w.config, http, w.clock);
  REQUIRE(scanner.Step());
  w.clock.Advance(10'000);
  p.failing = true;
  p.failed_boots = 3;
  REQUIRE(w.store.machines().SetPoolBoots(p, w.clock.Now()));
  REQUIRE(scanner.Step());
  REQUIRE(sender.Step());
  CHECK(hook.deliveries().size() == 2);

  // A budget past 80 % of its cap: once per pool and UTC day.
  p.spent_day = 41;
  p.budget_per_day = 50;
  REQUIRE(w.store.machines().SetPoolBudget(p, w.clock.Now()));
  REQUIRE(scanner.Step());
  REQUIRE(scanner.Step());
  REQUIRE(sender.Step());
  got = hook.deliveries();
  REQUIRE(got.size() == 3);
  CHECK(json::parse(got[2].body)["summary"] == "pool gpu spent $41.00 of its $50.00 per UTC day (82%)");
}

// One webhook target whose receiver misbehaves as `before` says, one event.
struct OneEvent {
  World w;
  CurlHttpClient http;
  NotifyOptions options;
  void Setup(const std::string& url) {
    w.Configure("  - name: ops\n    webhook: {url: " + url + ", secret: " + w.Secret() +
                "}\n    on: [queue_stuck]\n");
    BatchSpec spec;
    spec.experiment = "e";
    spec.command = "true";
    spec.repeats = 2;
    REQUIRE(w.store.runs().Submit("/srv/model", {kHead, "", "s", "me", 0}, {spec}, w.clock.Now()));
    w.clock.Advance(31 * 60'000);  // queued, nothing ran: stuck
    options.retry_base_ms = 1'000;
    options.timeout_ms = 2'000;
    NotifyScanner scanner(w.store, w.config, w.clock, options);
    REQUIRE(scanner.Step().value() == 1);
  }
  // Sends until delivered or `passes` passes, moving the clock past each backoff.
  void Deliver(int passes) {
    NotifySender sender(w.store, w.config, http, w.clock, options);
    for (int i = 0; i < passes; ++i) {
      REQUIRE(sender.Step());
      auto sums = w.store.outbox().Summaries("notify:").value();
      if (!sums.empty() && sums[0].delivered == 1) return;
      w.clock.Advance(60'000);
    }
  }
  OutboxTargetSummary Summary() { return w.store.outbox().Summaries("notify:").value().at(0); }
};

TEST_CASE("notify: a target that is down, then up, gets the message once", "[notify]") {
  OneEvent t;
  const int port = testing::FreeLoopbackPort();
  t.Setup("http://127.0.0.1:" + std::to_string(port) + "/hooks/trainq");
  t.Deliver(2);  // refused twice
  CHECK(t.Summary().pending == 1);
  CHECK(t.Summary().last_error.starts_with("POST http://127.0.0.1:" + std::to_string(port) +
                                           "/hooks/trainq: "));
  testing::SignedReceiver hook("hook-key", nullptr, port);
  t.Deliver(3);
  CHECK(t.Summary().delivered == 1);
  REQUIRE(hook.deliveries().size() == 1);
  CHECK(hook.deliveries()[0].event == "queue_stuck");
  t.Deliver(3);
  CHECK(hook.requests() == 1);
}

TEST_CASE("notify: a target that answers 500 then 200 gets the message once, same delivery id",
          "[notify]") {
  int calls = 0;
  testing::SignedReceiver hook("hook-key", [&](const testing::TestHttpRequest&) {
    return ++calls == 1 ? testing::TestHttpResponse{500, "boom", {}}
                        : testing::TestHttpResponse{0, "", {}};
  });
  OneEvent t;
  t.Setup(hook.url());
  t.Deliver(4);
  CHECK(t.Summary().delivered == 1);
  CHECK(t.Summary().last_error == "HTTP 500 from the webhook ops (" + hook.url() + "): boom");
  auto reqs = hook.all_requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].Header("X-Trainq-Delivery") == reqs[1].Header("X-Trainq-Delivery"));
  CHECK(hook.deliveries().size() == 1);
}

TEST_CASE("notify: a slow target gets the message once, and one slower than the timeout is "
          "retried with the same delivery id", "[notify]") {
  int calls = 0;
  testing::SignedReceiver hook("hook-key", [&](const testing::TestHttpRequest&) {
    // The first answer comes after the sender's 2 s timeout, the second
    // after half a second: slow, in time.
    std::this_thread::sleep_for(std::chrono::milliseconds(++calls == 1 ? 2'500 : 500));
    return testing::TestHttpResponse{0, "", {}};
  });
  OneEvent t;
  t.Setup(hook.url());
  t.Deliver(3);
  CHECK(t.Summary().delivered == 1);
  auto got = hook.deliveries();
  // The receiver accepted both (the first answer was lost to the timeout);
  // they carry one delivery id, which is how a receiver drops the repeat.
  REQUIRE(got.size() == 2);
  CHECK(got[0].id == got[1].id);
  CHECK(t.Summary().last_error.find("timed out") != std::string::npos);
}

TEST_CASE("notify: a permanent refusal is given up at once, and a rate limit holds messages back",
          "[notify]") {
  World w;
  testing::FakeSlack gone([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{410, "channel_is_archived", {}};
  });
  w.Configure("  - name: ml\n    slack: {webhook_url: " + w.SlackUrlFile(gone.url()) +
              "}\n    on: [budget]\n    rate_limit: 2\n");
  for (int i = 0; i < 3; ++i) {
    REQUIRE(w.store.outbox().Enqueue("notify:ml", "k" + std::to_string(i), "budget", "d", "{}",
                                     w.clock.Now()));
  }
  CurlHttpClient http;
  NotifySender sender(w.store, w.config, http, w.clock);
  REQUIRE(sender.Step());
  auto s = w.store.outbox().Summaries("notify:").value().at(0);
  CHECK(s.gave_up == 3);
  CHECK(s.last_error == "HTTP 410 from the Slack webhook of ml: channel_is_archived");
  CHECK(s.last_error.find("XXXXXXXXXXXX") == std::string::npos);  // the URL is a secret

  testing::FakeSlack ok;
  World w2;
  w2.Configure("  - name: ml\n    slack: {webhook_url: " + w2.SlackUrlFile(ok.url()) +
               "}\n    on: [budget]\n    rate_limit: 2\n");
  for (int i = 0; i < 5; ++i) {
    REQUIRE(w2.store.outbox().Enqueue("notify:ml", "k" + std::to_string(i), "budget", "d",
                                      R"({"event": "budget", "summary": "s", "url": ""})",
                                      w2.clock.Now()));
  }
  NotifySender s2(w2.store, w2.config, http, w2.clock);
  REQUIRE(s2.Step());
  CHECK(ok.texts().size() == 2);
  w2.clock.Advance(30'000);
  REQUIRE(s2.Step());
  CHECK(ok.texts().size() == 2);  // the minute is not over
  w2.clock.Advance(31'000);
  REQUIRE(s2.Step());
  CHECK(ok.texts().size() == 4);
}

}  // namespace
}  // namespace trainq
