// Forges: push payloads in their real shapes, repository URL matching, and
// the commit status requests each forge's API expects.
#include "agent/forge.h"

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

}  // namespace
}  // namespace trainq
