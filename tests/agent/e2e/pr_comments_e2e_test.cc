// End to end, with the real binary and real git, for GitHub, GitLab and Gitea:
// the forge keeps a pull request's head under its own ref in a bare
// repository (refs/pull/N/head, refs/merge-requests/N/head) and sends signed
// pull request webhooks in its real shape (tests/fixtures) to a running
// `trainq serve`. Opening the pull request queues the touched experiment at
// the head, compared with the merge-base; once its runs end ONE comment is
// created on a fake forge on loopback; a new push to the pull request edits
// that same comment. A pull request from a fork is ignored.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
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
  repeats: 3
experiments:
  a:
    command: sh run.sh a {seed}
    watch: [configs/a.yaml, run.sh]
  b:
    command: sh run.sh b {seed}
    watch: [configs/b.yaml, run.sh]
)";

// The metric is 0.<lr><seed>: lr 6 gives 0.61, 0.62, 0.63.
const char* kRun = R"(lr=$(sed -n 's/^lr: //p' "configs/$1.yaml")
printf '{"name": "accuracy", "value": 0.%s%s}\n' "$lr" "$2" >> "$TRAINQ_METRICS_FILE"
)";

std::string Fixture(const std::string& path) {
  auto text = ReadFile(std::string(TRAINQ_SOURCE_DIR) + "/tests/fixtures/" + path);
  REQUIRE(text);
  return *text;
}

struct ForgeCase {
  ForgeKind forge;
  std::string name;         // github | gitlab | gitea
  std::string pr_ref;       // refs/pull/N/head or refs/merge-requests/N/head, with N
  std::string comments;     // the comment collection path of pull request 1
  std::string edit_method;  // PATCH or PUT
  std::string said;         // "pull request #1" or "merge request !1"
};

ForgeCase Case(ForgeKind forge) {
  switch (forge) {
    case ForgeKind::kGitlab:
      return {forge,
              "gitlab",
              "refs/merge-requests/N/head",
              "/projects/test%2Forigin/merge_requests/1/notes",
              "PUT",
              "merge request !1"};
    case ForgeKind::kGitea:
      return {forge,   "gitea",          "refs/pull/N/head", "/repos/test/origin/issues/1/comments",
              "PATCH", "pull request #1"};
    default:
      return {forge,   "github",         "refs/pull/N/head", "/repos/test/origin/issues/1/comments",
              "PATCH", "pull request #1"};
  }
}

// A pull request payload in the forge's shape (from the fixtures), pointed at
// our repository: number n, head sha, into main; `sync` for new commits.
std::string PrPayload(ForgeKind forge, bool sync, int n, const std::string& sha, bool fork,
                      const std::string& origin_url) {
  if (forge == ForgeKind::kGitlab) {
    json j = json::parse(Fixture(sync ? "gitlab/merge_request_update_new_commits.json"
                                      : "gitlab/merge_request_open.json"));
    auto& oa = j["object_attributes"];
    oa["iid"] = n;
    oa["last_commit"]["id"] = sha;
    oa["target_branch"] = "main";
    oa["source_branch"] = "feature";
    oa["source_project_id"] = fork ? 15 : 14;
    j["project"]["git_http_url"] = origin_url;
    j["project"]["path_with_namespace"] = "test/origin";
    j["project"]["default_branch"] = "main";
    return j.dump();
  }
  bool gitea = forge == ForgeKind::kGitea;
  json j = json::parse(Fixture(
      gitea ? (sync ? "gitea/pull_request_synchronized.json" : "gitea/pull_request_opened.json")
            : (sync ? "github/pull_request_synchronize.json" : "github/pull_request_opened.json")));
  j["number"] = n;
  auto& pr = j["pull_request"];
  pr["number"] = n;
  pr["head"]["sha"] = sha;
  pr["head"]["ref"] = "feature";
  pr["base"]["ref"] = "main";
  for (json* repo : {&j["repository"], &pr["base"]["repo"], &pr["head"]["repo"]}) {
    (*repo)["clone_url"] = origin_url;
    (*repo)["full_name"] = "test/origin";
    (*repo)["default_branch"] = "main";
  }
  if (fork) {
    pr["head"]["repo"]["id"] = 424242;
    pr["head"]["repo"]["full_name"] = "mallory/origin";
    pr["head"]["repo_id"] = 424242;
  }
  return j.dump();
}

std::string PushPayload(ForgeKind forge, const std::string& sha, const std::string& origin_url) {
  json j = {{"ref", "refs/heads/main"}, {"before", std::string(kZeroSha)}, {"after", sha}};
  if (forge == ForgeKind::kGitlab) {
    j["project"] = {{"git_http_url", origin_url},
                    {"path_with_namespace", "test/origin"},
                    {"default_branch", "main"}};
  } else {
    j["repository"] = {
        {"clone_url", origin_url}, {"full_name", "test/origin"}, {"default_branch", "main"}};
  }
  return j.dump();
}

HttpHeaders Signed(ForgeKind forge, bool pr, const std::string& body, const std::string& secret,
                   const std::string& delivery) {
  switch (forge) {
    case ForgeKind::kGitlab:
      return {{"X-Gitlab-Event", pr ? "Merge Request Hook" : "Push Hook"},
              {"X-Gitlab-Token", secret},
              {"X-Gitlab-Event-UUID", delivery}};
    case ForgeKind::kGitea:
      return {{"X-Gitea-Event", pr ? "pull_request" : "push"},
              {"X-Gitea-Delivery", delivery},
              {"X-Gitea-Signature", HmacSha256Hex(secret, body)}};
    default:
      return {{"X-GitHub-Event", pr ? "pull_request" : "push"},
              {"X-GitHub-Delivery", delivery},
              {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)}};
  }
}

TEST_CASE(
    "e2e: pull request opened -> head queued against the merge-base -> one comment, new "
    "commits -> the same comment edited, forks ignored",
    "[server][e2e][pr]") {
  ForgeKind kind = GENERATE(ForgeKind::kGithub, ForgeKind::kGitlab, ForgeKind::kGitea);
  ForgeCase fc = Case(kind);
  INFO("forge " << fc.name);
  testing::TempDir tmp;
  const std::string secret = "pr-e2e-secret";
  REQUIRE(WriteFile(tmp / "secret", secret + "\n"));
  REQUIRE(WriteFile(tmp / "token", "pr-e2e-token\n"));

  // The forge: a bare repository and a fake API for statuses and comments.
  std::string origin = tmp / "origin.git";
  GitCli::InitBare(origin);
  std::string origin_url = "file://" + origin;
  std::atomic<int> next_id{500};
  testing::TestHttpServer forge([&](const testing::TestHttpRequest& r) {
    if (r.method == "POST" && r.target.find("/statuses/") == std::string::npos) {
      return testing::TestHttpResponse{201, json{{"id", next_id++}, {"body", "x"}}.dump(), {}};
    }
    return testing::TestHttpResponse{r.method == "POST" ? 201 : 200, "{}", {}};
  });

  GitCli work(tmp / "work");
  std::string a = work.Commit({{"trainq.yaml", kManifest},
                               {"run.sh", kRun},
                               {"configs/a.yaml", "lr: 5\n"},
                               {"configs/b.yaml", "lr: 6\n"}},
                              "base");
  work.Run("remote add origin " + ShellQuote(origin));
  work.Run("push -q origin main");
  auto pr_ref = [&](int n) {
    std::string r = fc.pr_ref;
    return r.replace(r.find('N'), 1, std::to_string(n));
  };

  // clang-format off
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "repositories:\n"
                    "  - url: " + origin_url + "\n"
                    "    forge: " + fc.name + "\n"
                    "    project: test/origin\n"
                    "    branches: [main]\n"
                    "    secret: {file: " + (tmp / "secret") + "}\n"
                    "    token: {file: " + (tmp / "token") + "}\n"
                    "    api_url: " + forge.url() + "\n"
                    "    status: true\n"));
  // clang-format on
  std::string db = testing::StoreLocation(tmp, "trainq.db");
  int port = testing::FreeLoopbackPort();
  std::string base_url = "http://127.0.0.1:" + std::to_string(port);
  testing::Daemon daemon;
  REQUIRE(daemon.ServeWithConfig(db, tmp / "server.yaml", port, tmp.path()));
  CurlHttpClient http;
  int deliveries = 0;
  auto send = [&](bool pr, const std::string& body) {
    auto r = http.Send({"POST", base_url + "/hooks/" + fc.name,
                        Signed(kind, pr, body, secret, "d-" + std::to_string(++deliveries)), body,
                        5000});
    REQUIRE(r);
    return *r;
  };
  auto store = Store::Open(db).value();
  auto batches_at = [&](const std::string& sha) {
    std::vector<BatchProgress> out;
    auto all = store.runs().Batches(false, 0).value();
    for (auto& b : all) {
      if (b.sha == sha) out.push_back(std::move(b));
    }
    return out;
  };
  auto all_ended = [&](const std::string& sha) {
    auto bs = batches_at(sha);
    if (bs.empty()) return false;
    for (const auto& b : bs) {
      if (b.active()) return false;
    }
    return true;
  };
  auto comment_requests = [&] {
    std::vector<testing::TestHttpRequest> out;
    auto all = forge.requests();
    for (auto& r : all) {
      if (r.target.find("/statuses/") == std::string::npos) out.push_back(std::move(r));
    }
    return out;
  };
  auto last_comment = [&]() -> std::string {
    auto reqs = comment_requests();
    return reqs.empty() ? "" : json::parse(reqs.back().body)["body"].get<std::string>();
  };
  auto log = [&] { return ReadFile(tmp / "serve.log").value_or(""); };

  // main runs both experiments at A.
  REQUIRE(send(false, PushPayload(kind, a, origin_url)).status == 202);
  bool ran = testing::WaitFor([&] { return batches_at(a).size() == 2 && all_ended(a); }, 60s);
  if (!ran) FAIL(log());

  // Pull request 1: one commit that changes b (lr 6 -> 7: better).
  work.Run("checkout -q -b feature");
  std::string b = work.Commit({{"configs/b.yaml", "lr: 7\n"}}, "tune b");
  work.Run("push -q origin " + b + ":" + pr_ref(1));
  auto opened = send(true, PrPayload(kind, false, 1, b, false, origin_url));
  INFO(opened.body);
  REQUIRE(opened.status == 202);
  REQUIRE(testing::WaitFor([&] { return !batches_at(b).empty(); }, 20s));
  auto at_b = batches_at(b);
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].experiment == "b");
  CHECK(at_b[0].reason == fc.name + " " + fc.said + " into main: compared with the merge-base " +
                              a.substr(0, 10) +
                              " with main; configs/b.yaml matches watch "
                              "'configs/b.yaml'");
  REQUIRE(testing::WaitFor(
      [&] { return last_comment().find("#### `b`: better") != std::string::npos; }, 60s));
  INFO(log());
  std::string first = last_comment();
  CHECK(first.find("| base | `" + a.substr(0, 10) + "` | 0.6200 ± 0.0100 | 3 |") !=
        std::string::npos);
  CHECK(first.find("| head | `" + b.substr(0, 10) + "` | 0.7200 ± 0.0100 | 3 |") !=
        std::string::npos);
  auto reqs = comment_requests();
  REQUIRE_FALSE(reqs.empty());
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].target == fc.comments);
  CHECK(reqs[0].Header("User-Agent") == "trainq/0.1");

  // A pull request from a fork: recorded as skipped, nothing runs.
  work.Run("checkout -q -b fork main");
  std::string d = work.Commit({{"configs/a.yaml", "lr: 9\n"}}, "from a fork");
  work.Run("push -q origin " + d + ":" + pr_ref(2));
  auto fork = send(true, PrPayload(kind, false, 2, d, true, origin_url));
  INFO(fork.body);
  CHECK(fork.status == 200);
  CHECK(json::parse(fork.body)["result"] == "ignored");
  CHECK(json::parse(fork.body)["reason"].get<std::string>().find("comes from a fork") !=
        std::string::npos);

  // New commits on pull request 1 (lr 7 -> 5: worse): the same comment is edited.
  work.Run("checkout -q feature");
  std::string c = work.Commit({{"configs/b.yaml", "lr: 5\n"}}, "retune b");
  work.Run("push -q -f origin " + c + ":" + pr_ref(1));
  REQUIRE(send(true, PrPayload(kind, true, 1, c, false, origin_url)).status == 202);
  REQUIRE(testing::WaitFor(
      [&] {
        std::string body = last_comment();
        return body.find("Head `" + c.substr(0, 10) + "`") != std::string::npos &&
               body.find("#### `b`: worse") != std::string::npos;
      },
      60s));
  reqs = comment_requests();
  int creates = 0;
  std::string id;
  for (const auto& r : reqs) {
    if (r.method == "POST") {
      ++creates;
      continue;
    }
    CHECK(r.method == fc.edit_method);
    std::string prefix =
        kind == ForgeKind::kGitlab ? fc.comments + "/" : "/repos/test/origin/issues/comments/";
    REQUIRE(r.target.starts_with(prefix));
    if (id.empty()) id = r.target.substr(prefix.size());
    CHECK(r.target.substr(prefix.size()) == id);  // always the same comment
  }
  CHECK(creates == 1);
  CHECK(id == "500");
  CHECK(batches_at(d).empty());  // the fork's head never ran

  daemon.runner.KillGroup(daemon.pid, SIGTERM);
  auto exit = daemon.runner.Wait(daemon.pid);
  daemon.pid = 0;
  INFO("serve: " << exit.Describe() << "\n" << log());
  CHECK(exit.ok());
  CHECK(log().find("pr-e2e-token") == std::string::npos);
}

}  // namespace
}  // namespace trainq
