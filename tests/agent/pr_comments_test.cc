// Pull request comments against fake forges on loopback that speak GitHub's,
// GitLab's and Gitea's comment APIs, with a real store: one comment created,
// then edited in place (the same id) as runs end and new heads are pushed.
#include "agent/triggers/pr_comments.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "agent/repo/mirror.h"
#include "core/strings.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

const std::string kBase = "1111111111111111111111111111111111111111";
const std::string kHead = "2222222222222222222222222222222222222222";
const std::string kHead2 = "3333333333333333333333333333333333333333";

// A forge that answers a create with a new comment id and an edit with 200.
struct FakeForge {
  std::atomic<int> next_id{900};
  testing::TestHttpServer server{[this](const testing::TestHttpRequest& r) {
    if (r.method == "POST") {
      return testing::TestHttpResponse{201, json{{"id", next_id++}, {"body", "..."}}.dump(), {}};
    }
    return testing::TestHttpResponse{200, "{}", {}};
  }};
};

struct World {
  testing::TempDir tmp;
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config;
  std::string url;
  std::string mirror;
  int deliveries = 0;

  World(const std::string& forge, const std::string& url_, const std::string& api_url,
        const std::string& extra = "")
      : url(url_) {
    REQUIRE(WriteFile(tmp / "token", "forge-token"));
    auto c = ParseServerConfig("repositories:\n  - url: " + url + "\n    forge: " + forge +
                                   "\n    status: true\n    api_url: " + api_url +
                                   "\n    token: {file: " + (tmp / "token") + "}\n" + extra,
                               "server.yaml");
    INFO((c ? "" : c.error().message));
    REQUIRE(c);
    config = *c;
    mirror = Mirror::PathFor(tmp / "data", url);
  }

  std::int64_t Submit(const std::string& sha, const std::string& parent) {
    BatchSpec spec;
    spec.experiment = "lstm";
    spec.command = "true";
    spec.repeats = 3;
    auto r = store.Submit(mirror, {sha, parent, "s", "me", 0}, {spec}, clock.Now());
    REQUIRE(r);
    return r->front().batch_id;
  }

  void FinishRuns(const std::vector<double>& values) {
    auto leased = store.Lease("w", clock.Now(), 60'000, 10).value();
    REQUIRE(leased.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      REQUIRE(store.Complete(leased[i].run_id, leased[i].token, clock.Now(), values[i]));
    }
  }

  // A processed pull request push, as the push worker leaves it.
  void PrPush(const std::string& source, std::int64_t pr, const std::string& head) {
    Store::Push p;
    p.source = source;
    p.delivery_id = "d" + std::to_string(++deliveries);
    p.repo_url = url;
    p.ref = "refs/pull/" + std::to_string(pr) + "/head";
    p.before_sha = std::string(kZeroSha);
    p.after_sha = head;
    p.pr_number = pr;
    p.target_branch = "main";
    auto id = store.RecordPush(p, clock.Now()).value();
    REQUIRE(id);
    REQUIRE(store.FinishPush(*id, "done", "queued lstm", "", clock.Now()));
  }
};

TEST_CASE(
    "pr comments: created once when the head is queued, edited in place to the verdict, "
    "edited again for a new head (GitHub)",
    "[pr_comments]") {
  FakeForge forge;
  World w("github", "https://github.com/acme/model.git", forge.server.url());
  CurlHttpClient http;
  PrCommentReporter reporter(w.store, w.config, http, w.clock, w.tmp / "data");
  w.Submit(kBase, "");
  w.FinishRuns({0.60, 0.61, 0.62});
  w.Submit(kHead, kBase);
  w.PrPush("github", 7, kHead);

  REQUIRE(reporter.Step().value() == 1);
  auto reqs = forge.server.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].target == "/repos/acme/model/issues/7/comments");
  CHECK(reqs[0].Header("Authorization") == "Bearer forge-token");
  CHECK(reqs[0].Header("User-Agent") == "trainq/0.1");
  CHECK(reqs[0].Header("Accept") == "application/vnd.github+json");
  std::string first = json::parse(reqs[0].body)["body"];
  CHECK(first.find("#### `lstm`: running: 0/3 runs ended") != std::string::npos);
  auto row = w.store.GetPrComment(w.url, 7).value();
  REQUIRE(row);
  CHECK(row->comment_id == "900");
  CHECK_FALSE(row->settled);

  // Nothing changed: nothing is posted.
  CHECK(reporter.Step().value() == 0);
  // The runs end: the settled body goes out at once, as an edit of comment 900.
  w.FinishRuns({0.70, 0.72, 0.71});
  REQUIRE(reporter.Step().value() == 1);
  reqs = forge.server.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[1].method == "PATCH");
  CHECK(reqs[1].target == "/repos/acme/model/issues/comments/900");
  std::string done = json::parse(reqs[1].body)["body"];
  INFO(done);
  CHECK(done ==
        "<!-- trainq: this comment is edited in place on each push -->\n"
        "### trainq: pull request #7\n\n"
        "Head `2222222222` into `main`, each experiment against its baseline (the same "
        "experiment at the merge-base, or the batch trainq chose for it).\n\n"
        "#### `lstm`: better\n\n"
        "accuracy, higher is better\n\n"
        "| | commit | accuracy (mean ± sd) | n | difference (95% CI) | test | verdict |\n"
        "|---|---|---|---|---|---|---|\n"
        "| base | `1111111111` | 0.6100 ± 0.0100 | 3 | | | |\n"
        "| head | `2222222222` | 0.7100 ± 0.0100 | 3 | +0.1000 (+0.0752..+0.1248) | paired t, "
        "p=0.003 | better |\n");
  CHECK(w.store.GetPrComment(w.url, 7).value()->settled);
  CHECK(reporter.Step().value() == 0);

  // A new push to the pull request: the same comment is edited for the new head.
  w.clock.Advance(60'000);
  w.Submit(kHead2, kHead);
  w.PrPush("github", 7, kHead2);
  REQUIRE(reporter.Step().value() == 1);
  reqs = forge.server.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[2].method == "PATCH");
  CHECK(reqs[2].target == "/repos/acme/model/issues/comments/900");
  CHECK(json::parse(reqs[2].body)["body"].get<std::string>().find("Head `3333333333`") !=
        std::string::npos);
  int creates = 0;
  for (const auto& r : reqs) creates += r.method == "POST";
  CHECK(creates == 1);
}

TEST_CASE("pr comments: GitLab notes are created with POST and edited with PUT", "[pr_comments]") {
  FakeForge forge;
  World w("gitlab", "https://gitlab.example.com/group/sub/model.git", forge.server.url());
  CurlHttpClient http;
  PrCommentReporter reporter(w.store, w.config, http, w.clock, w.tmp / "data");
  w.Submit(kHead, kBase);
  w.PrPush("gitlab", 3, kHead);
  REQUIRE(reporter.Step().value() == 1);
  w.FinishRuns({0.5, 0.6, 0.7});
  REQUIRE(reporter.Step().value() == 1);
  auto reqs = forge.server.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].target == "/projects/group%2Fsub%2Fmodel/merge_requests/3/notes");
  CHECK(reqs[0].Header("PRIVATE-TOKEN") == "forge-token");
  CHECK(reqs[1].method == "PUT");
  CHECK(reqs[1].target == "/projects/group%2Fsub%2Fmodel/merge_requests/3/notes/900");
  std::string body = json::parse(reqs[1].body)["body"];
  CHECK(body.find("### trainq: merge request !3") != std::string::npos);
  CHECK(body.find("#### `lstm`: no baseline: no runs of this experiment at the base") !=
        std::string::npos);
}

TEST_CASE("pr comments: Gitea, and a comment deleted on the forge is created again",
          "[pr_comments]") {
  std::atomic<bool> gone{false};
  std::atomic<int> next{40};
  testing::TestHttpServer server([&](const testing::TestHttpRequest& r) {
    if (r.method == "POST") return testing::TestHttpResponse{201, json{{"id", next++}}.dump(), {}};
    if (gone) return testing::TestHttpResponse{404, R"({"message":"not found"})", {}};
    return testing::TestHttpResponse{200, "{}", {}};
  });
  World w("gitea", "https://gitea.example.com/o/model.git", server.url());
  CurlHttpClient http;
  PrCommentReporter reporter(w.store, w.config, http, w.clock, w.tmp / "data");
  w.Submit(kHead, kBase);
  w.PrPush("gitea", 2, kHead);
  REQUIRE(reporter.Step().value() == 1);
  gone = true;
  w.FinishRuns({0.5, 0.6, 0.7});
  REQUIRE(reporter.Step().value() == 1);  // PATCH: 404
  CHECK(w.store.GetPrComment(w.url, 2).value()->comment_id.empty());
  REQUIRE(reporter.Step().value() == 1);  // POST again
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0].target == "/repos/o/model/issues/2/comments");
  CHECK(reqs[0].Header("Authorization") == "token forge-token");
  CHECK(reqs[1].method == "PATCH");
  CHECK(reqs[1].target == "/repos/o/model/issues/comments/40");
  CHECK(reqs[2].method == "POST");
  CHECK(w.store.GetPrComment(w.url, 2).value()->comment_id == "41");
}

TEST_CASE(
    "pr comments: a forge that fails is retried with backoff, nothing posted when nothing "
    "ran, off with pr_comments: false",
    "[pr_comments]") {
  testing::TestHttpServer server([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{502, "bad gateway", {}};
  });
  World w("github", "https://github.com/acme/model.git", server.url());
  CurlHttpClient http;
  PrCommentReporter reporter(w.store, w.config, http, w.clock, w.tmp / "data");
  // A head with no batch: no comment at all.
  w.PrPush("github", 5, kBase);
  CHECK(reporter.Step().value() == 0);
  CHECK(server.requests().empty());

  w.Submit(kHead, kBase);
  w.PrPush("github", 6, kHead);
  REQUIRE(reporter.Step().value() == 1);
  auto row = w.store.GetPrComment(w.url, 6).value();
  REQUIRE(row);
  CHECK(row->attempts == 1);
  CHECK(row->last_error.starts_with("HTTP 502 from POST "));
  CHECK(reporter.Step().value() == 0);  // backing off
  w.clock.Advance(5'000);
  CHECK(reporter.Step().value() == 1);

  World off("github", "https://github.com/acme/model.git", server.url(),
            "    pr_comments: false\n");
  CurlHttpClient http2;
  PrCommentReporter quiet(off.store, off.config, http2, off.clock, off.tmp / "data");
  off.Submit(kHead, kBase);
  off.PrPush("github", 6, kHead);
  CHECK(quiet.Step().value() == 0);
  CHECK(off.store.GetPrComment(off.url, 6).value()->body.empty());
}

}  // namespace
}  // namespace trainq
