// Webhook receipt: signatures, limits, dedupe and what gets recorded, with the
// forges' real payloads (tests/fixtures) and a real SQLite store.
#include "agent/triggers/webhook.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "agent/triggers/server_config.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

std::string Fixture(const std::string& path) {
  auto text = ReadFile(std::string(TRAINQ_SOURCE_DIR) + "/tests/fixtures/" + path);
  REQUIRE(text);
  return *text;
}

ServerConfig Config(const std::string& yaml) {
  auto c = ParseServerConfig(yaml, "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  return *c;
}

struct Env {
  Env(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_); }
  const char* name_;
};

// Repositories matching the fixtures' repositories.
struct Fixture3 {
  Env gh{"WH_TEST_GH", "It's a Secret to Everybody"};
  Env gl{"WH_TEST_GL", "gitlab-token-123"};
  Env ge{"WH_TEST_GE", "gitea-secret"};
  Env other{"WH_TEST_OTHER", "another secret"};
  testing::TempDir tmp;
  ServerConfig config = Config(R"(
repositories:
  - url: https://github.com/Codertocat/Hello-World.git
    forge: github
    secret: {env: WH_TEST_GH}
  - url: https://github.com/acme/other.git
    forge: github
    secret: {env: WH_TEST_OTHER}
  - url: http://example.com/mike/diaspora.git
    forge: gitlab
    secret: {env: WH_TEST_GL}
  - url: http://localhost:3000/gitea/webhooks.git
    forge: gitea
    branches: [master, "release/*"]
    secret: {env: WH_TEST_GE}
)");
  Store store = Store::Open(tmp / "t.db").value();

  size_t Pushes() { return store.pushes().RecentPushes(1000).value().size(); }
};

HttpHeaders GithubHeaders(const std::string& event, const std::string& body,
                          const std::string& secret, const std::string& delivery) {
  return {{"X-GitHub-Event", event},
          {"X-GitHub-Delivery", delivery},
          {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)},
          {"Content-Type", "application/json"}};
}

TEST_CASE("webhook: HMAC-SHA256 matches GitHub's documented test vector", "[webhook]") {
  CHECK(HmacSha256Hex("It's a Secret to Everybody", "Hello, World!") ==
        "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
  HttpHeaders h = {{"X-Hub-Signature-256",
                    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}};
  CHECK(VerifyWebhook(ForgeKind::kGithub, h, "Hello, World!", "It's a Secret to Everybody"));
  CHECK_FALSE(VerifyWebhook(ForgeKind::kGithub, h, "Hello, World?", "It's a Secret to Everybody"));
  CHECK_FALSE(VerifyWebhook(ForgeKind::kGithub, h, "Hello, World!", "another secret"));
  CHECK_FALSE(VerifyWebhook(ForgeKind::kGithub, h, "Hello, World!", ""));
  // Upper-case hex is the same signature.
  HttpHeaders upper = {{"x-hub-signature-256",
                        "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17"}};
  CHECK(VerifyWebhook(ForgeKind::kGithub, upper, "Hello, World!", "It's a Secret to Everybody"));
  // The old SHA-1 header alone is not accepted.
  HttpHeaders sha1 = {{"X-Hub-Signature", "sha1=0000"}};
  CHECK_FALSE(VerifyWebhook(ForgeKind::kGithub, sha1, "Hello, World!", "It's a Secret to Everybody"));
}

TEST_CASE("webhook: constant-time comparison compares contents and lengths", "[webhook]") {
  CHECK(ConstantTimeEquals("abc", "abc"));
  CHECK_FALSE(ConstantTimeEquals("abc", "abd"));
  CHECK_FALSE(ConstantTimeEquals("abc", "abcd"));
  CHECK_FALSE(ConstantTimeEquals("", "a"));
}

TEST_CASE("webhook: a signed GitHub push is recorded once, a redelivery is a duplicate",
          "[webhook]") {
  Fixture3 f;
  std::string body = Fixture("github/push_new_branch.json");
  auto headers = GithubHeaders("push", body, "It's a Secret to Everybody", "delivery-1");
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub, headers, body, 1000);
  INFO(r.body);
  CHECK(r.status == 202);
  CHECK(r.result == "accepted");
  auto j = json::parse(r.body);
  CHECK(j["result"] == "accepted");
  REQUIRE(r.push_id > 0);
  auto p = f.store.pushes().GetPush(r.push_id).value();
  REQUIRE(p);
  CHECK(p->source == "github");
  CHECK(p->delivery_id == "delivery-1");
  CHECK(p->repo_url == "https://github.com/Codertocat/Hello-World.git");
  CHECK(p->ref == "refs/heads/master");
  CHECK(p->before_sha == std::string(kZeroSha));
  CHECK(p->after_sha == "6113728f27ae82c7b1a177c8d03f9e96e0adf246");
  CHECK(p->default_branch == "master");
  CHECK(p->state == "pending");
  CHECK(p->received_ms == 1000);

  auto again = HandleWebhook(f.config, f.store, ForgeKind::kGithub, headers, body, 2000);
  CHECK(again.status == 200);
  CHECK(again.result == "duplicate");
  CHECK(json::parse(again.body)["result"] == "duplicate");
  CHECK(f.Pushes() == 1);

  // A new delivery id of the same push is a new delivery (GitHub's "redeliver"
  // keeps the id; a second hook would not).
  auto other = GithubHeaders("push", body, "It's a Secret to Everybody", "delivery-2");
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGithub, other, body, 3000).status == 202);
  CHECK(f.Pushes() == 2);
}

TEST_CASE("webhook: forged, unsigned, oversized and malformed deliveries store nothing",
          "[webhook]") {
  Fixture3 f;
  std::string body = Fixture("github/push_new_branch.json");
  struct Case {
    const char* what;
    HttpHeaders headers;
    std::string body;
    int status;
    const char* result;
  };
  std::string big(kMaxWebhookBodyBytes + 1, ' ');
  std::string bad_json = "{\"ref\": ";
  const std::vector<Case> cases = {
      {"no signature", {{"X-GitHub-Event", "push"}, {"X-GitHub-Delivery", "d1"}}, body, 401,
       "unauthorized"},
      {"wrong secret", GithubHeaders("push", body, "guess", "d2"), body, 401, "unauthorized"},
      {"signature of another body", GithubHeaders("push", body + " ", "It's a Secret to Everybody",
                                                   "d3"),
       body, 401, "unauthorized"},
      {"sha1 signature only",
       {{"X-GitHub-Event", "push"}, {"X-Hub-Signature", "sha1=" + std::string(40, 'a')}}, body,
       401, "unauthorized"},
      {"over 25 MB (checked before anything else)",
       GithubHeaders("push", big, "It's a Secret to Everybody", "d4"), big, 413, "too_large"},
      {"malformed JSON, correctly signed",
       GithubHeaders("push", bad_json, "It's a Secret to Everybody", "d5"), bad_json, 400,
       "malformed"},
      {"JSON without ref",
       GithubHeaders("push", "{}", "It's a Secret to Everybody", "d6"), "{}", 400, "malformed"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub, c.headers, c.body, 1000);
    CHECK(r.status == c.status);
    CHECK(r.result == c.result);
    CHECK(r.push_id == 0);
  }
  CHECK(f.Pushes() == 0);
  // The other repository's secret signs only its own repository.
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                         GithubHeaders("push", body, "another secret", "d7"), body, 1000);
  CHECK(r.status == 202);
  CHECK(r.result == "ignored");
  CHECK(json::parse(r.body)["reason"].get<std::string>().find("Codertocat/Hello-World") !=
        std::string::npos);
  CHECK(f.Pushes() == 0);
}

TEST_CASE("webhook: ping answers 200, other events 202 with the reason", "[webhook]") {
  Fixture3 f;
  std::string ping = Fixture("github/ping.json");
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                         GithubHeaders("ping", ping, "It's a Secret to Everybody", "p1"), ping, 1);
  CHECK(r.status == 200);
  CHECK(r.result == "ping");
  std::string issue = R"({"action":"opened","issue":{"number":1}})";
  r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                    GithubHeaders("issues", issue, "It's a Secret to Everybody", "i1"), issue, 1);
  CHECK(r.status == 202);
  CHECK(r.result == "ignored");
  CHECK(json::parse(r.body)["reason"] == "event 'issues' is not handled (only push and pull requests)");
  // A ping with a bad signature is still refused.
  r = HandleWebhook(f.config, f.store, ForgeKind::kGithub, GithubHeaders("ping", ping, "x", "p2"),
                    ping, 1);
  CHECK(r.status == 401);
  CHECK(f.Pushes() == 0);
}

TEST_CASE("webhook: tag pushes and deleted refs are recorded as skipped", "[webhook]") {
  Fixture3 f;
  for (const char* file : {"github/push_tag_created.json", "github/push_tag_deleted.json"}) {
    INFO(file);
    std::string body = Fixture(file);
    auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                           GithubHeaders("push", body, "It's a Secret to Everybody", file), body, 1);
    CHECK(r.status == 200);
    CHECK(r.result == "ignored");
    auto p = f.store.pushes().GetPush(r.push_id).value();
    REQUIRE(p);
    CHECK(p->state == "skipped");
    CHECK(p->result.find("tag pushes are ignored") != std::string::npos);
  }
  // A deleted branch: the new-branch fixture with before and after swapped.
  auto j = json::parse(Fixture("github/push_new_branch.json"));
  j["before"] = j["after"];
  j["after"] = std::string(kZeroSha);
  j["deleted"] = true;
  std::string body = j.dump();
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                         GithubHeaders("push", body, "It's a Secret to Everybody", "del"), body, 1);
  CHECK(r.status == 200);
  auto p = f.store.pushes().GetPush(r.push_id).value();
  REQUIRE(p);
  CHECK(p->state == "skipped");
  CHECK(p->result == "branch master deleted: nothing runs");
  CHECK(f.store.pushes().DuePushes(10, 10).value().empty());
}

TEST_CASE("webhook: GitLab token and Idempotency-Key", "[webhook]") {
  Fixture3 f;
  std::string body = Fixture("gitlab/push.json");
  HttpHeaders h = {{"X-Gitlab-Event", "Push Hook"},
                   {"X-Gitlab-Token", "gitlab-token-123"},
                   {"Idempotency-Key", "8f1a-key"},
                   {"X-Gitlab-Event-UUID", "uuid-1"}};
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGitlab, h, body, 1);
  INFO(r.body);
  CHECK(r.status == 202);
  auto p = f.store.pushes().GetPush(r.push_id).value();
  REQUIRE(p);
  CHECK(p->delivery_id == "8f1a-key");
  CHECK(p->repo_url == "http://example.com/mike/diaspora.git");
  CHECK(p->before_sha == "95790bf891e76fee5e1747ab589903a6a1f80f22");
  CHECK(p->after_sha == "da1560886d4f094c3e6c9ef40349f7d38b5d27d7");
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGitlab, h, body, 2).result == "duplicate");

  HttpHeaders wrong = {{"X-Gitlab-Event", "Push Hook"}, {"X-Gitlab-Token", "gitlab-token-12"}};
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGitlab, wrong, body, 3).status == 401);
  // The GitHub secret does not open the GitLab endpoint.
  HttpHeaders cross = {{"X-Gitlab-Event", "Push Hook"},
                       {"X-Gitlab-Token", "It's a Secret to Everybody"}};
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGitlab, cross, body, 3).status == 401);

  // Without any id, the same body is recognised by its hash.
  HttpHeaders no_id = {{"X-Gitlab-Event", "Push Hook"}, {"X-Gitlab-Token", "gitlab-token-123"}};
  auto first = HandleWebhook(f.config, f.store, ForgeKind::kGitlab, no_id, body, 4);
  CHECK(first.status == 202);
  CHECK(f.store.pushes().GetPush(first.push_id).value()->delivery_id.starts_with("sha256:"));
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGitlab, no_id, body, 5).result ==
        "duplicate");
  CHECK(f.Pushes() == 2);
}

TEST_CASE("webhook: Gitea signature, and branches outside `branches`", "[webhook]") {
  Fixture3 f;
  std::string body = Fixture("gitea/push.json");  // refs/heads/develop
  HttpHeaders h = {{"X-Gitea-Event", "push"},
                   {"X-Gitea-Delivery", "gitea-1"},
                   {"X-Gitea-Signature", HmacSha256Hex("gitea-secret", body)}};
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGitea, h, body, 1);
  INFO(r.body);
  CHECK(r.status == 200);
  CHECK(r.result == "ignored");
  auto p = f.store.pushes().GetPush(r.push_id).value();
  REQUIRE(p);
  CHECK(p->state == "skipped");
  CHECK(p->result ==
        "branch develop is not in `branches` of http://localhost:3000/gitea/webhooks.git");

  auto j = json::parse(body);
  j["ref"] = "refs/heads/release/2.0";
  std::string release = j.dump();
  HttpHeaders h2 = {{"X-Gitea-Event", "push"},
                    {"X-Gitea-Delivery", "gitea-2"},
                    {"X-Gitea-Signature", HmacSha256Hex("gitea-secret", release)}};
  r = HandleWebhook(f.config, f.store, ForgeKind::kGitea, h2, release, 2);
  CHECK(r.status == 202);
  CHECK(f.store.pushes().GetPush(r.push_id).value()->state == "pending");

  HttpHeaders unsigned_h = {{"X-Gitea-Event", "push"}, {"X-Gitea-Delivery", "gitea-3"}};
  CHECK(HandleWebhook(f.config, f.store, ForgeKind::kGitea, unsigned_h, release, 3).status == 401);
}

TEST_CASE("webhook: a repository without a secret refuses every webhook", "[webhook]") {
  testing::TempDir tmp;
  auto config = Config("repositories:\n  - url: https://github.com/Codertocat/Hello-World.git\n"
                       "    forge: github\n");
  auto store = Store::Open(tmp / "t.db").value();
  std::string body = Fixture("github/push_new_branch.json");
  auto r = HandleWebhook(config, store, ForgeKind::kGithub, GithubHeaders("push", body, "", "x"),
                         body, 1);
  CHECK(r.status == 401);
}

TEST_CASE("webhook: a GitHub pull request is recorded as a push of refs/pull/N/head",
          "[webhook][pr]") {
  Fixture3 f;
  const std::string secret = "It's a Secret to Everybody";
  std::string body = Fixture("github/pull_request_opened.json");
  auto r = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                         GithubHeaders("pull_request", body, secret, "pr-1"), body, 1000);
  INFO(r.body);
  CHECK(r.status == 202);
  CHECK(json::parse(r.body)["pull_request"] == 2);
  auto p = f.store.pushes().GetPush(r.push_id).value();
  REQUIRE(p);
  CHECK(p->ref == "refs/pull/2/head");
  CHECK(p->after_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
  CHECK(p->pr_number == 2);
  CHECK(p->target_branch == "master");
  CHECK(p->state == "pending");
  // The forge's pull ref is no branch head: the poller never sees it.
  CHECK(f.store.pushes().RefHeads(p->repo_url).value().empty());

  // The same delivery again: a duplicate.
  auto again = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                             GithubHeaders("pull_request", body, secret, "pr-1"), body, 2000);
  CHECK(again.status == 200);
  CHECK(again.result == "duplicate");

  // Closing runs nothing and records nothing.
  std::string closed = Fixture("github/pull_request_closed.json");
  auto c = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                         GithubHeaders("pull_request", closed, secret, "pr-2"), closed, 3000);
  CHECK(c.status == 202);
  CHECK(c.result == "ignored");
  CHECK(json::parse(c.body)["reason"] ==
        "pull request #2: action 'closed' runs nothing (only a new or reopened pull request or "
        "new commits do)");
  CHECK(f.Pushes() == 1);

  // A forged signature on a pull request: 401, as for pushes.
  auto forged = HandleWebhook(f.config, f.store, ForgeKind::kGithub,
                              GithubHeaders("pull_request", body, "guess", "pr-3"), body, 4000);
  CHECK(forged.status == 401);
}

TEST_CASE("webhook: pull requests from forks are ignored unless the repository opts in",
          "[webhook][pr]") {
  Env gh{"WH_TEST_GH", "It's a Secret to Everybody"};
  testing::TempDir tmp;
  Store store = Store::Open(tmp / "t.db").value();
  auto j = json::parse(Fixture("github/pull_request_opened.json"));
  j["pull_request"]["head"]["repo"]["id"] = 424242;
  j["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World";
  std::string body = j.dump();
  auto headers = [&](const char* id) {
    return GithubHeaders("pull_request", body, "It's a Secret to Everybody", id);
  };
  std::string repo = R"(
repositories:
  - url: https://github.com/Codertocat/Hello-World.git
    forge: github
    secret: {env: WH_TEST_GH}
)";
  auto off = HandleWebhook(Config(repo), store, ForgeKind::kGithub, headers("f1"), body, 1000);
  INFO(off.body);
  CHECK(off.status == 200);
  CHECK(off.result == "ignored");
  CHECK(json::parse(off.body)["reason"] ==
        "pull request #2 comes from a fork: its code would run on your machines, so forks are "
        "ignored unless `fork_pull_requests: true`");
  CHECK(store.pushes().GetPush(off.push_id).value()->state == "skipped");

  auto on = HandleWebhook(Config(repo + "    fork_pull_requests: true\n"), store,
                          ForgeKind::kGithub, headers("f2"), body, 2000);
  CHECK(on.status == 202);
  CHECK(store.pushes().GetPush(on.push_id).value()->state == "pending");

  auto none = HandleWebhook(Config(repo + "    pull_requests: false\n"), store, ForgeKind::kGithub,
                            headers("f3"), body, 3000);
  CHECK(none.status == 200);
  CHECK(json::parse(none.body)["reason"] ==
        "pull request #2: pull requests are off for "
        "https://github.com/Codertocat/Hello-World.git (`pull_requests: false`)");
  auto unwatched = HandleWebhook(Config(repo + "    fork_pull_requests: true\n    branches: [main]\n"),
                                 store, ForgeKind::kGithub, headers("f4"), body, 4000);
  CHECK(unwatched.status == 200);
  CHECK(json::parse(unwatched.body)["reason"] ==
        "pull request #2 targets master, which is not in `branches` of "
        "https://github.com/Codertocat/Hello-World.git");
}

TEST_CASE("webhook: GitLab merge requests and Gitea pull requests", "[webhook][pr]") {
  Env gl{"WH_TEST_GL2", "gitlab-token-123"};
  Env ge{"WH_TEST_GE", "gitea-secret"};
  testing::TempDir tmp;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config = Config(R"(
repositories:
  - url: http://example.com/gitlabhq/gitlab-test.git
    forge: gitlab
    secret: {env: WH_TEST_GL2}
  - url: http://localhost:3000/gitea/webhooks.git
    forge: gitea
    secret: {env: WH_TEST_GE}
)");
  auto gitlab = [&](const std::string& body, const char* id) {
    return HandleWebhook(config, store, ForgeKind::kGitlab,
                         {{"X-Gitlab-Event", "Merge Request Hook"},
                          {"X-Gitlab-Token", "gitlab-token-123"},
                          {"X-Gitlab-Event-UUID", id}},
                         body, 1000);
  };
  auto open = gitlab(Fixture("gitlab/merge_request_open.json"), "u1");
  INFO(open.body);
  CHECK(open.status == 202);
  auto p = store.pushes().GetPush(open.push_id).value();
  REQUIRE(p);
  CHECK(p->ref == "refs/merge-requests/1/head");
  CHECK(p->pr_number == 1);
  CHECK(p->target_branch == "master");
  CHECK(gitlab(Fixture("gitlab/merge_request_update_new_commits.json"), "u2").status == 202);
  auto title = gitlab(Fixture("gitlab/merge_request_update_title.json"), "u3");
  CHECK(title.status == 202);
  CHECK(title.result == "ignored");
  CHECK(json::parse(title.body)["reason"] ==
        "merge request !1: update without new commits runs nothing (only a new or reopened merge "
        "request or new commits do)");

  std::string body = Fixture("gitea/pull_request_synchronized.json");
  auto r = HandleWebhook(config, store, ForgeKind::kGitea,
                         {{"X-Gitea-Event", "pull_request"},
                          {"X-Gitea-Delivery", "g1"},
                          {"X-Gitea-Signature", HmacSha256Hex("gitea-secret", body)}},
                         body, 2000);
  INFO(r.body);
  CHECK(r.status == 202);
  auto g = store.pushes().GetPush(r.push_id).value();
  REQUIRE(g);
  CHECK(g->ref == "refs/pull/2/head");
  CHECK(g->after_sha == "d3c6e8f2a1b4c5d6e7f8091a2b3c4d5e6f708192");
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE("webhook: a repository over its webhook_rate_limit gets 429 with Retry-After, nothing stored",
          "[webhook]") {
  Env gh{"WH_TEST_GH", "It's a Secret to Everybody"};
  Env other{"WH_TEST_OTHER", "another secret"};
  testing::TempDir tmp;
  ServerConfig config = Config(R"(
repositories:
  - url: https://github.com/Codertocat/Hello-World.git
    forge: github
    secret: {env: WH_TEST_GH}
    webhook_rate_limit: 2
  - url: https://github.com/acme/other.git
    forge: github
    secret: {env: WH_TEST_OTHER}
)");
  Store store = Store::Open(tmp / "t.db").value();
  WebhookLimiter limiter;
  std::string body = Fixture("github/push_new_branch.json");
  auto deliver = [&](const std::string& id, TimeMs now) {
    auto h = GithubHeaders("push", body, "It's a Secret to Everybody", id);
    return HandleWebhook(config, store, ForgeKind::kGithub, h, body, now, &limiter);
  };
  CHECK(deliver("d1", 0).status == 202);
  CHECK(deliver("d2", 0).status == 202);
  auto third = deliver("d3", 0);
  INFO(third.body);
  CHECK(third.status == 429);
  CHECK(third.result == "rate_limited");
  CHECK(third.retry_after_s == 30);  // 2 a minute: one more in 30 s
  CHECK(json::parse(third.body)["reason"].get<std::string>().find("webhook_rate_limit of 2") !=
        std::string::npos);
  CHECK(store.pushes().RecentPushes(10).value().size() == 2);
  // A forged delivery takes nothing from the budget (refused before it).
  auto forged = GithubHeaders("push", body, "wrong", "d4");
  CHECK(HandleWebhook(config, store, ForgeKind::kGithub, forged, body, 0, &limiter).status == 401);
  // The bucket refills at the rate: one more after 30 s, not two.
  CHECK(deliver("d5", 29'000).status == 429);
  CHECK(deliver("d6", 30'000).status == 202);
  CHECK(deliver("d7", 30'000).status == 429);
  CHECK(store.pushes().RecentPushes(10).value().size() == 3);
  // Without a limiter (or with webhook_rate_limit: 0) nothing is limited.
  CHECK(HandleWebhook(config, store, ForgeKind::kGithub,
                      GithubHeaders("push", body, "It's a Secret to Everybody", "d8"), body, 30'000)
            .status == 202);
}

TEST_CASE("webhook: webhook_rate_limit and coalesce are checked with file:line:key",
          "[webhook][server_config]") {
  auto bad = ParseServerConfig(
      "repositories:\n  - url: https://x/y.git\n    forge: none\n    coalesce: sometimes\n",
      "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("server.yaml:4") != std::string::npos);
  CHECK(bad.error().message.find("coalesce") != std::string::npos);
  auto neg = ParseServerConfig(
      "repositories:\n  - url: https://x/y.git\n    forge: none\n    webhook_rate_limit: -1\n",
      "server.yaml");
  REQUIRE_FALSE(neg);
  CHECK(neg.error().message.find("webhook_rate_limit") != std::string::npos);
  auto ok = ParseServerConfig("repositories:\n  - url: https://x/y.git\n    forge: none\n",
                              "server.yaml");
  REQUIRE(ok);
  CHECK(ok->repositories[0].webhook_rate_limit == 60);
  CHECK(ok->repositories[0].coalesce == RepoConfig::Coalesce::kBranches);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// Regression (fault probe a4598a0, F5/t19): the rate limit was spent before
// skipping and deduplication, so 12 signed fork pull request events (always
// skipped without fork_pull_requests) and replays got the owner's push to
// the default branch a 429, which GitHub does not redeliver by itself.
TEST_CASE("webhook: skipped fork pull requests and replays spend no rate limit: the owner's push "
          "to the default branch is accepted (t19)",
          "[webhook]") {
  Env gh{"WH_TEST_GH", "It's a Secret to Everybody"};
  testing::TempDir tmp;
  const std::string repo = R"(
repositories:
  - url: https://github.com/Codertocat/Hello-World.git
    forge: github
    secret: {env: WH_TEST_GH}
    webhook_rate_limit: 10
)";
  Store store = Store::Open(tmp / "t.db").value();
  WebhookLimiter limiter;
  auto fork_pr = json::parse(Fixture("github/pull_request_opened.json"));
  fork_pr["action"] = "synchronize";
  fork_pr["pull_request"]["head"]["repo"]["id"] = 424242;
  fork_pr["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World";
  const std::string fork_body = fork_pr.dump();
  const std::string push_body = Fixture("github/push_new_branch.json");  // to master, the default
  auto deliver = [&](const ServerConfig& config, const std::string& event, const std::string& body,
                     const std::string& id, TimeMs now) {
    auto h = GithubHeaders(event, body, "It's a Secret to Everybody", id);
    return HandleWebhook(config, store, ForgeKind::kGithub, h, body, now, &limiter);
  };
  SECTION("without fork_pull_requests") {
    ServerConfig config = Config(repo);
    auto first = deliver(config, "push", push_body, "push-1", 0);
    REQUIRE(first.status == 202);
    for (int i = 0; i < 12; ++i) {
      auto r = deliver(config, "pull_request", fork_body, "fork-" + std::to_string(i), 1000);
      INFO(r.body);
      CHECK(r.status == 200);
      CHECK(r.result == "ignored");
    }
    // Ten are recorded as skipped; the other two are over the budget of
    // skipped deliveries and answered without being stored.
    auto counts = store.pushes().CountPushesByState().value();
    CHECK(std::find(counts.begin(), counts.end(), std::pair<std::string, std::int64_t>{
                                                      "skipped", 10}) != counts.end());
    for (int i = 0; i < 5; ++i) {
      auto replay = deliver(config, "push", push_body, "push-1", 2000);
      CHECK(replay.status == 200);
      CHECK(replay.result == "duplicate");
    }
    // The owner's next pushes: nine more fit the default branch's budget.
    for (int i = 2; i <= 10; ++i) {
      auto r = deliver(config, "push", push_body, "push-" + std::to_string(i), 3000);
      INFO(i << " " << r.body);
      CHECK(r.status == 202);
    }
    auto over = deliver(config, "push", push_body, "push-11", 3000);
    CHECK(over.status == 429);
    CHECK(json::parse(over.body)["reason"].get<std::string>().find("for the default branch") !=
          std::string::npos);
  }
  SECTION("with fork_pull_requests: forks have a budget of their own") {
    ServerConfig config = Config(repo + "    fork_pull_requests: true\n");
    int accepted = 0, limited = 0;
    for (int i = 0; i < 12; ++i) {
      auto r = deliver(config, "pull_request", fork_body, "fork-" + std::to_string(i), 0);
      if (r.status == 202) ++accepted;
      if (r.status == 429) {
        ++limited;
        CHECK(json::parse(r.body)["reason"].get<std::string>().find("for fork pull requests") !=
              std::string::npos);
      }
    }
    CHECK(accepted == 10);
    CHECK(limited == 2);
    auto owner = deliver(config, "push", push_body, "push-1", 0);
    INFO(owner.body);
    CHECK(owner.status == 202);
  }
  SECTION("pushes to other branches do not spend the default branch's budget") {
    ServerConfig config = Config(repo + "    default_branch: main\n");  // master is another branch
    for (int i = 0; i < 10; ++i) {
      CHECK(deliver(config, "push", push_body, "other-" + std::to_string(i), 0).status == 202);
    }
    CHECK(deliver(config, "push", push_body, "other-10", 0).status == 429);
    auto j = json::parse(push_body);
    j["ref"] = "refs/heads/main";
    std::string main_body = j.dump();
    CHECK(deliver(config, "push", main_body, "main-1", 0).status == 202);
  }
}

TEST_CASE("webhook: a push a catch-up recorded already is a duplicate when its webhook arrives late",
          "[webhook][catch_up]") {
  Env gh{"WH_TEST_GH", "It's a Secret to Everybody"};
  testing::TempDir tmp;
  ServerConfig config = Config(R"(
repositories:
  - url: https://github.com/Codertocat/Hello-World.git
    forge: github
    secret: {env: WH_TEST_GH}
)");
  Store store = Store::Open(tmp / "t.db").value();
  const std::string body = Fixture("github/push_new_branch.json");
  auto j = json::parse(body);
  Pushes::Push caught;
  caught.source = "catch-up";
  caught.repo_url = config.repositories[0].url;
  caught.ref = j["ref"];
  caught.before_sha = j["before"];
  caught.after_sha = j["after"];
  caught.delivery_id = "catch-up:" + caught.ref + ":" + caught.before_sha + ".." + caught.after_sha;
  auto id = store.pushes().RecordPushIfHead(caught, 0).value();
  REQUIRE(id);
  auto late = HandleWebhook(config, store, ForgeKind::kGithub,
                            GithubHeaders("push", body, "It's a Secret to Everybody", "late"), body,
                            1000);
  INFO(late.body);
  CHECK(late.status == 200);
  CHECK(late.result == "duplicate");
  CHECK(json::parse(late.body)["push"] == *id);
  CHECK(store.pushes().RecentPushes(10).value().size() == 1);
  // RecordPushIfHead records nothing once the head moved: the move again
  // from the old head is refused.
  caught.delivery_id = "catch-up:again";
  CHECK_FALSE(store.pushes().RecordPushIfHead(caught, 2000).value());
}

}  // namespace
}  // namespace trainq
