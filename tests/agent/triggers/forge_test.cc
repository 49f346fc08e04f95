// Forges: push payloads in their real shapes, repository URL matching, and
// the commit status requests each forge's API expects.
#include "agent/triggers/forge.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/strings.h"

using nlohmann::json;

namespace trainq {
namespace {

std::string Fixture(const std::string& path) {
  auto text = ReadFile(std::string(TRAINQ_SOURCE_DIR) + "/tests/fixtures/" + path);
  REQUIRE(text);
  return *text;
}

TEST_CASE("forge: GitHub push payloads (octokit examples)", "[forge]") {
  auto e = ParsePushEvent(ForgeKind::kGithub, Fixture("github/push_new_branch.json"));
  REQUIRE(e);
  CHECK(e->ref == "refs/heads/master");
  CHECK(e->branch() == "master");
  CHECK(e->is_branch());
  CHECK(e->created());
  CHECK_FALSE(e->deleted());
  CHECK(e->after == "6113728f27ae82c7b1a177c8d03f9e96e0adf246");
  CHECK(e->commits == std::vector<std::string>{"6113728f27ae82c7b1a177c8d03f9e96e0adf246"});
  CHECK(e->full_name == "Codertocat/Hello-World");
  CHECK(e->default_branch == "master");
  CHECK(std::find(e->repo_urls.begin(), e->repo_urls.end(),
                  "https://github.com/Codertocat/Hello-World.git") != e->repo_urls.end());
  CHECK(std::find(e->repo_urls.begin(), e->repo_urls.end(),
                  "git@github.com:Codertocat/Hello-World.git") != e->repo_urls.end());

  auto tag = ParsePushEvent(ForgeKind::kGithub, Fixture("github/push_tag_created.json"));
  REQUIRE(tag);
  CHECK(tag->is_tag());
  CHECK(tag->branch().empty());
  auto deleted = ParsePushEvent(ForgeKind::kGithub, Fixture("github/push_tag_deleted.json"));
  REQUIRE(deleted);
  CHECK(deleted->deleted());
}

TEST_CASE("forge: GitLab and Gitea push payloads (documented examples)", "[forge]") {
  auto gl = ParsePushEvent(ForgeKind::kGitlab, Fixture("gitlab/push.json"));
  REQUIRE(gl);
  CHECK(gl->ref == "refs/heads/master");
  CHECK(gl->before == "95790bf891e76fee5e1747ab589903a6a1f80f22");
  CHECK(gl->commits.size() == 2);
  CHECK(gl->commits.back() == gl->after);
  CHECK(gl->full_name == "mike/diaspora");
  CHECK(gl->default_branch == "master");
  CHECK(std::find(gl->repo_urls.begin(), gl->repo_urls.end(),
                  "http://example.com/mike/diaspora.git") != gl->repo_urls.end());

  auto ge = ParsePushEvent(ForgeKind::kGitea, Fixture("gitea/push.json"));
  REQUIRE(ge);
  CHECK(ge->branch() == "develop");
  CHECK(ge->full_name == "gitea/webhooks");
  CHECK(ge->repo_urls.front() == "http://localhost:3000/gitea/webhooks.git");
}

TEST_CASE("forge: malformed push payloads name what is wrong", "[forge]") {
  struct Case {
    const char* body;
    const char* message;
  };
  const Case cases[] = {
      {"not json", "body is not valid JSON"},
      {"[1,2]", "body is not a JSON object"},
      {R"({"before":"0","after":"0"})", "push payload has no \"ref\""},
      {R"({"ref":"refs/heads/x","before":"abc","after":"0000000000000000000000000000000000000000"})",
       "push payload: \"before\" is not a commit id"},
      {R"({"ref":"refs/heads/x","before":"0000000000000000000000000000000000000000",
           "after":"0000000000000000000000000000000000000000"})",
       "push payload does not name its repository"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    auto e = ParsePushEvent(ForgeKind::kGithub, c.body);
    REQUIRE_FALSE(e);
    CHECK(e.error().kind == ErrorKind::kInvalidArgument);
    CHECK(e.error().message == c.message);
  }
}

TEST_CASE("forge: delivery ids and event names from the forges' headers", "[forge]") {
  CHECK(WebhookDeliveryId(ForgeKind::kGithub, {{"x-github-delivery", "abc"}}, "b") == "abc");
  CHECK(WebhookDeliveryId(ForgeKind::kGitea, {{"X-Gitea-Delivery", "g1"}}, "b") == "g1");
  CHECK(WebhookDeliveryId(ForgeKind::kGitlab,
                          {{"X-Gitlab-Event-UUID", "u1"}, {"Idempotency-Key", "k1"}}, "b") == "k1");
  CHECK(WebhookDeliveryId(ForgeKind::kGitlab, {{"X-Gitlab-Event-UUID", "u1"}}, "b") == "u1");
  CHECK(WebhookDeliveryId(ForgeKind::kGitlab, {}, "body") == "sha256:" + Sha256Hex("body"));
  CHECK(WebhookEvent(ForgeKind::kGitlab, {{"X-Gitlab-Event", "Tag Push Hook"}}) ==
        "Tag Push Hook");
  CHECK(IsPushEvent(ForgeKind::kGitlab, "Tag Push Hook"));
  CHECK(IsPushEvent(ForgeKind::kGitea, "push"));
  CHECK_FALSE(IsPushEvent(ForgeKind::kGithub, "pull_request"));
  CHECK(IsPingEvent(ForgeKind::kGithub, "ping"));
}

TEST_CASE("forge: repository URLs compare across their spellings", "[forge]") {
  struct Case {
    const char* a;
    const char* b;
    bool same;
  };
  const Case cases[] = {
      {"https://github.com/Org/Repo.git", "git@github.com:org/repo.git", true},
      {"https://github.com/org/repo", "https://GitHub.com/org/repo.git/", true},
      {"ssh://git@gitlab.example.com/group/sub/proj.git", "https://gitlab.example.com/group/sub/proj",
       true},
      {"https://user@github.com/org/repo.git", "https://github.com/org/repo", true},
      {"https://github.com/org/repo", "https://github.com/org/repo2", false},
      {"file:///srv/git/model.git", "/srv/git/model", true},
      {"file:///srv/git/Model.git", "/srv/git/model", false},  // paths keep their case
  };
  for (const auto& c : cases) {
    INFO(c.a << " vs " << c.b);
    CHECK((NormaliseRepoUrl(c.a) == NormaliseRepoUrl(c.b)) == c.same);
  }
  CHECK(ProjectFromUrl("https://github.com/Org/Repo.git") == "Org/Repo");
  CHECK(ProjectFromUrl("git@gitlab.com:group/sub/proj.git") == "group/sub/proj");
  CHECK(ProjectFromUrl("/srv/git/model.git").empty());
  CHECK(DefaultApiUrl(ForgeKind::kGithub, "https://github.com/o/r") == "https://api.github.com");
  CHECK(DefaultApiUrl(ForgeKind::kGithub, "https://ghe.corp/o/r") == "https://ghe.corp/api/v3");
  CHECK(DefaultApiUrl(ForgeKind::kGitlab, "git@gitlab.com:o/r.git") == "https://gitlab.com/api/v4");
  CHECK(DefaultApiUrl(ForgeKind::kGitea, "https://gitea.io/o/r") == "https://gitea.io/api/v1");
}

TEST_CASE("forge: commit status requests in each forge's API shape", "[forge]") {
  std::string sha = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";
  SECTION("GitHub") {
    auto r = CommitStatusRequest({ForgeKind::kGithub, "https://api.github.com/", "o/r", "tok"}, sha,
                                 CommitState::kSuccess, "trainq/lstm",
                                 "accuracy 0.664 ± 0.015 (n=10)");
    CHECK(r.method == "POST");
    CHECK(r.url == "https://api.github.com/repos/o/r/statuses/" + sha);
    CHECK(FindHeader(r.headers, "Authorization") == "Bearer tok");
    CHECK(FindHeader(r.headers, "Accept") == "application/vnd.github+json");
    auto j = json::parse(r.body);
    CHECK(j["state"] == "success");
    CHECK(j["context"] == "trainq/lstm");
    CHECK(j["description"] == "accuracy 0.664 ± 0.015 (n=10)");
    CHECK_FALSE(j.contains("target_url"));
  }
  SECTION("target_url, the forges' Details link, in all three") {
    std::string page = "https://trainq.example/commit/" + sha;
    for (auto forge : {ForgeKind::kGithub, ForgeKind::kGitlab, ForgeKind::kGitea}) {
      auto r = CommitStatusRequest({forge, "https://forge.example/api", "o/r", "t"}, sha,
                                   CommitState::kSuccess, "trainq/lstm", "x", page);
      CHECK(json::parse(r.body)["target_url"] == page);
    }
  }
  SECTION("GitLab: project path encoded, PRIVATE-TOKEN, failed not failure") {
    auto r = CommitStatusRequest({ForgeKind::kGitlab, "https://gitlab.com/api/v4", "g/sub/p", "t"},
                                 sha, CommitState::kFailure, "trainq/lstm", "x");
    CHECK(r.url == "https://gitlab.com/api/v4/projects/g%2Fsub%2Fp/statuses/" + sha);
    CHECK(FindHeader(r.headers, "PRIVATE-TOKEN") == "t");
    auto j = json::parse(r.body);
    CHECK(j["state"] == "failed");
    CHECK(j["name"] == "trainq/lstm");
  }
  SECTION("Gitea") {
    auto r = CommitStatusRequest({ForgeKind::kGitea, "https://gitea.io/api/v1", "o/r", "t"}, sha,
                                 CommitState::kPending, "trainq/a", "queued");
    CHECK(r.url == "https://gitea.io/api/v1/repos/o/r/statuses/" + sha);
    CHECK(FindHeader(r.headers, "Authorization") == "token t");
    CHECK(json::parse(r.body)["state"] == "pending");
  }
  SECTION("descriptions are cut to 140 bytes without splitting a character") {
    std::string longer;
    for (int i = 0; i < 100; ++i) longer += "±";
    auto r = CommitStatusRequest({ForgeKind::kGithub, "https://api.github.com", "o/r", "t"}, sha,
                                 CommitState::kSuccess, "c", longer);
    auto d = json::parse(r.body)["description"].get<std::string>();
    CHECK(d.size() <= 140);
    CHECK(d.ends_with("±..."));
  }
}

TEST_CASE("forge: GitHub pull_request payloads (octokit examples)", "[forge][pr]") {
  CHECK(IsPullRequestEvent(ForgeKind::kGithub, "pull_request"));
  CHECK_FALSE(IsPullRequestEvent(ForgeKind::kGithub, "pull_request_review"));
  for (const char* name : {"opened", "synchronize", "reopened"}) {
    INFO(name);
    auto e = ParsePullRequestEvent(ForgeKind::kGithub,
                                   Fixture(std::string("github/pull_request_") + name + ".json"));
    REQUIRE(e);
    CHECK(e->action == name);
    CHECK(e->runs);
    CHECK(e->number == 2);
    CHECK(e->head_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    CHECK(e->head_ref == "changes");
    CHECK(e->target_branch == "master");
    CHECK_FALSE(e->from_fork);
    CHECK(e->full_name == "Codertocat/Hello-World");
    CHECK(e->title == "Update the README with new information.");
    CHECK(e->HeadRef(ForgeKind::kGithub) == "refs/pull/2/head");
    CHECK(std::find(e->repo_urls.begin(), e->repo_urls.end(),
                    "https://github.com/Codertocat/Hello-World.git") != e->repo_urls.end());
  }
  auto closed = ParsePullRequestEvent(ForgeKind::kGithub, Fixture("github/pull_request_closed.json"));
  REQUIRE(closed);
  CHECK(closed->action == "closed");
  CHECK_FALSE(closed->runs);

  // The same payload with the head in another repository: a fork.
  auto j = json::parse(Fixture("github/pull_request_opened.json"));
  j["pull_request"]["head"]["repo"]["id"] = 424242;
  j["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World";
  auto fork = ParsePullRequestEvent(ForgeKind::kGithub, j.dump());
  REQUIRE(fork);
  CHECK(fork->from_fork);
  CHECK(fork->full_name == "Codertocat/Hello-World");  // the base repository names the config
  j["pull_request"]["head"]["repo"] = nullptr;  // the fork was deleted
  auto gone = ParsePullRequestEvent(ForgeKind::kGithub, j.dump());
  REQUIRE(gone);
  CHECK(gone->from_fork);
}

TEST_CASE("forge: GitLab Merge Request Hook payloads (documented example)", "[forge][pr]") {
  CHECK(IsPullRequestEvent(ForgeKind::kGitlab, "Merge Request Hook"));
  CHECK_FALSE(IsPullRequestEvent(ForgeKind::kGitlab, "Note Hook"));
  auto e = ParsePullRequestEvent(ForgeKind::kGitlab, Fixture("gitlab/merge_request_open.json"));
  REQUIRE(e);
  CHECK(e->action == "open");
  CHECK(e->runs);
  CHECK(e->number == 1);
  CHECK(e->head_sha == "da1560886d4f094c3e6c9ef40349f7d38b5d27d7");
  CHECK(e->head_ref == "ms-viewport");
  CHECK(e->target_branch == "master");
  CHECK_FALSE(e->from_fork);  // source_project_id == target_project_id
  CHECK(e->full_name == "gitlabhq/gitlab-test");
  CHECK(e->title == "MS-Viewport");
  CHECK(e->HeadRef(ForgeKind::kGitlab) == "refs/merge-requests/1/head");
  CHECK(std::find(e->repo_urls.begin(), e->repo_urls.end(),
                  "http://example.com/gitlabhq/gitlab-test.git") != e->repo_urls.end());

  auto pushed =
      ParsePullRequestEvent(ForgeKind::kGitlab, Fixture("gitlab/merge_request_update_new_commits.json"));
  REQUIRE(pushed);
  CHECK(pushed->action == "update");
  CHECK(pushed->runs);
  auto retitled =
      ParsePullRequestEvent(ForgeKind::kGitlab, Fixture("gitlab/merge_request_update_title.json"));
  REQUIRE(retitled);
  CHECK_FALSE(retitled->runs);  // no oldrev: no new commits

  auto j = json::parse(Fixture("gitlab/merge_request_open.json"));
  j["object_attributes"]["source_project_id"] = 15;
  auto fork = ParsePullRequestEvent(ForgeKind::kGitlab, j.dump());
  REQUIRE(fork);
  CHECK(fork->from_fork);
}

TEST_CASE("forge: Gitea pull_request payloads", "[forge][pr]") {
  CHECK(IsPullRequestEvent(ForgeKind::kGitea, "pull_request"));
  CHECK(IsPullRequestEvent(ForgeKind::kGitea, "pull_request_sync"));
  auto e = ParsePullRequestEvent(ForgeKind::kGitea, Fixture("gitea/pull_request_opened.json"));
  REQUIRE(e);
  CHECK(e->runs);
  CHECK(e->number == 2);
  CHECK(e->head_sha == "bffeb74224043ba2feb48d137756c8a9331c449a");
  CHECK(e->head_ref == "develop");
  CHECK(e->target_branch == "master");
  CHECK_FALSE(e->from_fork);
  CHECK(e->full_name == "gitea/webhooks");
  CHECK(e->HeadRef(ForgeKind::kGitea) == "refs/pull/2/head");
  auto sync = ParsePullRequestEvent(ForgeKind::kGitea, Fixture("gitea/pull_request_synchronized.json"));
  REQUIRE(sync);
  CHECK(sync->action == "synchronized");
  CHECK(sync->runs);
  auto j = json::parse(Fixture("gitea/pull_request_opened.json"));
  j["action"] = "label_updated";
  auto labelled = ParsePullRequestEvent(ForgeKind::kGitea, j.dump());
  REQUIRE(labelled);
  CHECK_FALSE(labelled->runs);
  j["action"] = "opened";
  j["pull_request"]["head"]["repo_id"] = 141;
  j["pull_request"]["head"]["repo"]["id"] = 141;
  auto fork = ParsePullRequestEvent(ForgeKind::kGitea, j.dump());
  REQUIRE(fork);
  CHECK(fork->from_fork);
}

TEST_CASE("forge: malformed pull request payloads name what is wrong", "[forge][pr]") {
  auto no_pr = ParsePullRequestEvent(ForgeKind::kGithub, R"({"action":"opened","number":1})");
  REQUIRE_FALSE(no_pr);
  CHECK(no_pr.error().message == "pull request payload has no \"pull_request\"");
  auto j = json::parse(Fixture("github/pull_request_opened.json"));
  j["pull_request"]["head"]["sha"] = "abc";
  auto bad_sha = ParsePullRequestEvent(ForgeKind::kGithub, j.dump());
  REQUIRE_FALSE(bad_sha);
  CHECK(bad_sha.error().message == "pull request payload: the head commit is not a commit id");
  auto no_oa = ParsePullRequestEvent(ForgeKind::kGitlab, R"({"object_kind":"merge_request"})");
  REQUIRE_FALSE(no_oa);
  CHECK(no_oa.error().message == "merge request payload has no \"object_attributes\"");
}

TEST_CASE("forge: pull request comment requests in each forge's documented API shape",
          "[forge][pr]") {
  auto check_common = [](const HttpRequest& r) {
    CHECK(FindHeader(r.headers, "Content-Type") == "application/json");
    CHECK(FindHeader(r.headers, "User-Agent") == "trainq/0.1");
    CHECK(json::parse(r.body) == json{{"body", "| a | b |\n|---|---|"}});
  };
  const std::string body = "| a | b |\n|---|---|";
  SECTION("GitHub: POST issues/{n}/comments, then PATCH issues/comments/{id}") {
    StatusTarget t{ForgeKind::kGithub, "https://api.github.com/", "o/r", "tok"};
    auto c = CreateCommentRequest(t, 7, body);
    CHECK(c.method == "POST");
    CHECK(c.url == "https://api.github.com/repos/o/r/issues/7/comments");
    CHECK(FindHeader(c.headers, "Authorization") == "Bearer tok");
    CHECK(FindHeader(c.headers, "Accept") == "application/vnd.github+json");
    CHECK(FindHeader(c.headers, "X-GitHub-Api-Version") == "2022-11-28");
    check_common(c);
    auto e = EditCommentRequest(t, 7, "1234567", body);
    CHECK(e.method == "PATCH");
    CHECK(e.url == "https://api.github.com/repos/o/r/issues/comments/1234567");
    CHECK(FindHeader(e.headers, "Authorization") == "Bearer tok");
    check_common(e);
  }
  SECTION("GitLab: POST merge_requests/{iid}/notes, then PUT notes/{id}") {
    StatusTarget t{ForgeKind::kGitlab, "https://gitlab.com/api/v4", "g/sub/p", "t"};
    auto c = CreateCommentRequest(t, 3, body);
    CHECK(c.method == "POST");
    CHECK(c.url == "https://gitlab.com/api/v4/projects/g%2Fsub%2Fp/merge_requests/3/notes");
    CHECK(FindHeader(c.headers, "PRIVATE-TOKEN") == "t");
    CHECK(FindHeader(c.headers, "Accept") == "application/json");
    check_common(c);
    auto e = EditCommentRequest(t, 3, "305", body);
    CHECK(e.method == "PUT");
    CHECK(e.url == "https://gitlab.com/api/v4/projects/g%2Fsub%2Fp/merge_requests/3/notes/305");
    CHECK(FindHeader(e.headers, "PRIVATE-TOKEN") == "t");
    check_common(e);
  }
  SECTION("Gitea: POST issues/{n}/comments, then PATCH issues/comments/{id}") {
    StatusTarget t{ForgeKind::kGitea, "https://gitea.io/api/v1", "o/r", "t"};
    auto c = CreateCommentRequest(t, 2, body);
    CHECK(c.method == "POST");
    CHECK(c.url == "https://gitea.io/api/v1/repos/o/r/issues/2/comments");
    CHECK(FindHeader(c.headers, "Authorization") == "token t");
    CHECK(FindHeader(c.headers, "Accept") == "application/json");
    check_common(c);
    auto e = EditCommentRequest(t, 2, "88", body);
    CHECK(e.method == "PATCH");
    CHECK(e.url == "https://gitea.io/api/v1/repos/o/r/issues/comments/88");
    check_common(e);
  }
  CHECK(ParseCreatedCommentId(R"({"id": 1234567, "body": "x"})").value() == "1234567");
  CHECK(ParseCreatedCommentId(R"({"id": "305"})").value() == "305");
  auto none = ParseCreatedCommentId(R"({"message": "Not Found"})");
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "the forge's answer has no comment \"id\"");
}

TEST_CASE("forge: what a webhook's headers alone say before its body is read (issue 36 F2)",
          "[forge]") {
  const std::string hex(64, 'a');
  auto pre = [](ForgeKind f, HttpHeaders h, const std::string& secret = "s3cret") {
    return PrecheckWebhook(f, h, secret);
  };
  using P = WebhookPrecheck;
  CHECK(pre(ForgeKind::kGithub, {}) == P::kRefused);
  CHECK(pre(ForgeKind::kGithub, {{"X-Hub-Signature-256", "sha256=00"}}) == P::kRefused);
  CHECK(pre(ForgeKind::kGithub, {{"X-Hub-Signature-256", "sha1=" + hex}}) == P::kRefused);
  CHECK(pre(ForgeKind::kGithub, {{"X-Hub-Signature-256", "sha256=" + hex}}) == P::kNeedsBody);
  CHECK(pre(ForgeKind::kGithub, {{"X-Hub-Signature-256", "SHA256=" + std::string(64, 'A')}}) ==
        P::kNeedsBody);
  CHECK(pre(ForgeKind::kGithub, {{"X-Hub-Signature-256", "sha256=" + hex}}, "") == P::kRefused);
  CHECK(pre(ForgeKind::kGitea, {{"X-Gitea-Signature", hex}}) == P::kNeedsBody);
  CHECK(pre(ForgeKind::kGitea, {{"X-Gitea-Signature", "zz"}}) == P::kRefused);
  CHECK(pre(ForgeKind::kGitlab, {{"X-Gitlab-Token", "s3cret"}}) == P::kVerified);
  CHECK(pre(ForgeKind::kGitlab, {{"X-Gitlab-Token", "guess"}}) == P::kRefused);
  CHECK(pre(ForgeKind::kGitlab, {}) == P::kRefused);
}

}  // namespace
}  // namespace trainq

namespace trainq {

TEST_CASE("forge: FitStatusDescription cuts at 140 bytes on a character boundary", "[forge]") {
  CHECK(FitStatusDescription("short") == "short");
  CHECK(FitStatusDescription(std::string(140, 'x')) == std::string(140, 'x'));
  auto cut = FitStatusDescription(std::string(141, 'x'));
  CHECK(cut == std::string(137, 'x') + "...");
  // "±" is two bytes; one starting at byte 136 would be split by a cut at 137.
  auto utf8 = FitStatusDescription(std::string(136, 'x') + "±" + std::string(10, 'y'));
  CHECK(utf8 == std::string(136, 'x') + "...");
}

TEST_CASE("forge: NextForgeRetry doubles the delay and gives up at max_attempts", "[forge]") {
  auto first = NextForgeRetry(0, 5'000, 5);
  CHECK(first.attempt == 1);
  CHECK(first.delay_ms == 5'000);
  CHECK_FALSE(first.give_up);
  auto third = NextForgeRetry(2, 5'000, 5);
  CHECK(third.attempt == 3);
  CHECK(third.delay_ms == 20'000);
  CHECK(NextForgeRetry(4, 5'000, 5).give_up);
  // The doubling stops once it passes an hour.
  CHECK(NextForgeRetry(30, 5'000, 100).delay_ms < 2 * 3'600'000 + 5'000);
}

}  // namespace trainq
