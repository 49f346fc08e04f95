// Pull request comments against fake forges on loopback that speak GitHub's,
// GitLab's and Gitea's comment APIs, with a real store: one comment created,
// then edited in place (the same id) as runs end and new heads are pushed.
#include "agent/triggers/pr_comments.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <cmath>
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
    auto r = store.runs().Submit(mirror, {sha, parent, "s", "me", 0}, {spec}, clock.Now());
    REQUIRE(r);
    return r->front().batch_id;
  }

  void FinishRuns(const std::vector<double>& values) {
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 10).value();
    REQUIRE(leased.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      REQUIRE(store.runs().Complete(leased[i].run_id, leased[i].token, clock.Now(), values[i]));
    }
  }

  // A processed pull request push, as the push worker leaves it.
  void PrPush(const std::string& source, std::int64_t pr, const std::string& head) {
    Pushes::Push p;
    p.source = source;
    p.delivery_id = "d" + std::to_string(++deliveries);
    p.repo_url = url;
    p.ref = "refs/pull/" + std::to_string(pr) + "/head";
    p.before_sha = std::string(kZeroSha);
    p.after_sha = head;
    p.pr_number = pr;
    p.target_branch = "main";
    auto id = store.pushes().RecordPush(p, clock.Now()).value();
    REQUIRE(id);
    REQUIRE(store.pushes().FinishPush(*id, "done", "queued lstm", "", clock.Now()));
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
  auto row = w.store.pushes().GetPrComment(w.url, 7).value();
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
        "| | commit | accuracy (mean ± sd) | n | difference (interval) | test | verdict |\n"
        "|---|---|---|---|---|---|---|\n"
        "| base | `1111111111` | 0.6100 ± 0.0100 | 3 | | | |\n"
        "| head | `2222222222` | 0.7100 ± 0.0100 | 3 | +0.1000 (95% CI +0.0752..+0.1248) | paired t, "
        "p=0.003 | better |\n");
  CHECK(w.store.pushes().GetPrComment(w.url, 7).value()->settled);
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

TEST_CASE("pr comments: with public_url the comment links to the head's dashboard page (issue "
          "38.6)",
          "[pr_comments]") {
  FakeForge forge;
  World w("github", "https://github.com/acme/model.git", forge.server.url());
  w.config.public_url = "https://trainq.example";
  CurlHttpClient http;
  PrCommentReporter reporter(w.store, w.config, http, w.clock, w.tmp / "data");
  w.Submit(kBase, "");
  w.FinishRuns({0.60, 0.61, 0.62});
  w.Submit(kHead, kBase);
  w.PrPush("github", 7, kHead);
  REQUIRE(reporter.Step().value() == 1);
  std::string body = json::parse(forge.server.requests().at(0).body)["body"];
  INFO(body);
  CHECK(body.find("\n[Seeds, runs and logs of `2222222222` on the dashboard]"
                  "(https://trainq.example/commit/" + kHead + ")\n") != std::string::npos);
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
  CHECK(w.store.pushes().GetPrComment(w.url, 2).value()->comment_id.empty());
  REQUIRE(reporter.Step().value() == 1);  // POST again
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0].target == "/repos/o/model/issues/2/comments");
  CHECK(reqs[0].Header("Authorization") == "token forge-token");
  CHECK(reqs[1].method == "PATCH");
  CHECK(reqs[1].target == "/repos/o/model/issues/comments/40");
  CHECK(reqs[2].method == "POST");
  CHECK(w.store.pushes().GetPrComment(w.url, 2).value()->comment_id == "41");
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
  auto row = w.store.pushes().GetPrComment(w.url, 6).value();
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
  CHECK(off.store.pushes().GetPrComment(off.url, 6).value()->body.empty());
}


// Twenty experiments changed at once, fixed per-seed values (the table of
// tests/agent/results/analysis_test.cc): e0 at p = 0.0068, e1 at p < 1e-7, the rest
// at p > 0.35, paired on seeds 1..10.
BatchProgress FamilyBatch(std::int64_t id, const std::string& experiment, const std::string& sha,
                          double mean, const std::string& spec = "{}") {
  constexpr double kZ[10] = {1, -1, 2, -2, 0.5, -0.5, 1.5, -1.5, 0.25, -0.25};
  BatchProgress b;
  b.id = id;
  b.experiment = experiment;
  b.sha = sha;
  b.metric_name = "accuracy";
  b.metric_goal = "max";
  b.spec_json = spec;
  for (int s = 1; s <= 10; ++s) {
    double v = 0.90 + 0.002 * s;
    if (!std::isnan(mean)) v += mean + 0.003 * kZ[s - 1];
    b.values.push_back(v);
    b.seeds.push_back(s);
  }
  b.counts[static_cast<int>(RunState::kSucceeded)] = 10;
  b.repeats = 10;
  return b;
}

double FamilyMean(int k) { return k == 0 ? -0.0043 : k == 1 ? -0.03 : 0.0001 * ((k % 11) - 5); }

TEST_CASE("PR comment over twenty experiments: Holm, raw and adjusted p, widened intervals",
          "[pr_comments][family]") {
  PrCommentView view;
  view.forge = "github";
  view.pr_number = 3;
  view.head_sha = std::string(40, '2');
  view.target_branch = "main";
  for (int k = 0; k < 20; ++k) {
    std::string name = "e" + std::string(k < 10 ? "0" : "") + std::to_string(k);
    view.experiments.emplace_back(FamilyBatch(100 + k, name, view.head_sha, FamilyMean(k)),
                                  FamilyBatch(200 + k, name, std::string(40, '1'), std::nan("")));
  }
  std::string body = RenderPrComment(view);
  INFO(body);
  CHECK(body.find("#### `e00`: no detectable change") != std::string::npos);
  CHECK(body.find("#### `e01`: worse") != std::string::npos);
  CHECK(body.find("paired t, p=0.007 raw, p=0.128 adjusted (Holm over 20)") != std::string::npos);
  CHECK(body.find("99.75% CI") != std::string::npos);
  CHECK(body.find("Verdicts are corrected for 20 experiments changed at once (Holm over 20)") !=
        std::string::npos);
  // correction none: the uncorrected answer.
  view.correction = stats::Correction::kNone;
  std::string none = RenderPrComment(view);
  CHECK(none.find("#### `e00`: worse") != std::string::npos);
}

TEST_CASE("PR comment: runs-needed advice for an undecided comparison with a min_effect",
          "[pr_comments][power]") {
  PrCommentView view;
  view.forge = "github";
  view.pr_number = 4;
  view.head_sha = std::string(40, '2');
  view.target_branch = "main";
  std::string spec = R"({"metric":{"min_effect":0.002}})";
  // A change of -0.0005 whose per-seed differences have sd 0.0038891 over 10
  // seeds: the interval reaches past ±0.002, so 10 seeds cannot tell.
  view.experiments.emplace_back(FamilyBatch(1, "e", view.head_sha, -0.0005, spec),
                                FamilyBatch(2, "e", std::string(40, '1'), std::nan(""), spec));
  std::string body = RenderPrComment(view);
  INFO(body);
  CHECK(body.find("#### `e`: not enough runs") != std::string::npos);
  // Paired, sd of the differences 0.0038891, d = 0.002, alpha 0.05, power
  // 0.8: 32 pairs (scipy.stats.nct, as tests/stats/power_reference.py).
  CHECK(body.find("to detect ±0.0020 with power 0.8: about 32 seeds per side (now 10)") !=
        std::string::npos);
}

}  // namespace
}  // namespace trainq
