// Mirror: real repositories fetched with libgit2 (file:// and http with a
// token against a loopback server), history queries and tree diffs.
#include "agent/repo/mirror.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "agent/repo/git_repo.h"
#include "core/strings.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

using testing::GitCli;

struct Origin {
  testing::TempDir tmp;
  GitCli git{tmp / "origin"};
  std::string url = "file://" + (tmp / "origin");
  std::string data = tmp / "data";
};

TEST_CASE("mirror: fetches a file:// repository into a bare mirror runs can check out from",
          "[mirror]") {
  Origin o;
  std::string c1 = o.git.Commit({{"trainq.yaml", "v1"}, {"configs/a.yaml", "a"}}, "one");
  std::string path = Mirror::PathFor(o.data, o.url);
  CHECK(path.starts_with(o.data + "/mirrors/"));
  CHECK(path.ends_with("/origin.git"));
  CHECK(Mirror::PathFor(o.data, o.url) == path);
  CHECK(Mirror::PathFor(o.data, o.url + "2") != path);

  auto m = Mirror::Open(path, o.url);
  REQUIRE(m);
  CHECK_FALSE(m->HasCommit(c1));
  auto st = m->Fetch({});
  INFO((st ? "" : st.error().message));
  REQUIRE(st);
  CHECK(m->HasCommit(c1));
  auto refs = m->Refs().value();
  CHECK(refs["refs/heads/main"] == c1);
  CHECK(m->DefaultBranch() == "main");

  // The executor's way in: GitRepo on the mirror, checkout into a directory.
  auto repo = GitRepo::Open(m->path());
  REQUIRE(repo);
  CHECK(repo->ReadFile(c1, "configs/a.yaml").value() == "a");
  REQUIRE(repo->CheckoutTo(c1, o.tmp / "wt"));
  CHECK(ReadFile(o.tmp / "wt/trainq.yaml").value() == "v1");

  // Reopening finds the same mirror.
  auto again = Mirror::Open(path, o.url);
  REQUIRE(again);
  CHECK(again->HasCommit(c1));
}

TEST_CASE("mirror: a pull request's head ref is fetched when asked for, and only then",
          "[mirror][pr]") {
  Origin o;
  o.git.Commit({{"a", "1"}}, "one");
  o.git.Run("checkout -q -b feature");
  std::string head = o.git.Commit({{"a", "2"}}, "pr head");
  o.git.Run("checkout -q main");
  o.git.Run("update-ref refs/pull/9/head " + head);
  o.git.Run("update-ref refs/merge-requests/9/head " + head);
  o.git.Run("branch -q -D feature");
  auto m = Mirror::Open(Mirror::PathFor(o.data, o.url), o.url).value();
  REQUIRE(m.Fetch({}));
  CHECK_FALSE(m.ResolveRef("refs/pull/9/head").value());  // branches and tags only
  REQUIRE(m.Fetch({}, {"refs/pull/9/head"}));
  CHECK(m.HasCommit(head));
  CHECK(m.ResolveRef("refs/pull/9/head").value() == head);
  CHECK(m.Refs().value().count("refs/pull/9/head") == 0);  // never mistaken for a branch
  REQUIRE(m.Fetch({}, {"refs/merge-requests/9/head"}));
  CHECK(m.ResolveRef("refs/merge-requests/9/head").value() == head);
}

TEST_CASE("mirror: history questions and tree diffs with renames", "[mirror]") {
  Origin o;
  std::string base = o.git.Commit({{"configs/a.yaml", "alpha: 1\nlong enough to be similar\n"},
                                   {"train.py", "print(1)\n"}},
                                  "base");
  o.git.Run("checkout -q -b feature");
  std::string f1 = o.git.Commit({{"train.py", "print(2)\n"}}, "f1");
  o.git.Run("mv configs/a.yaml configs/renamed.yaml");
  std::string f2 = o.git.Commit({{"new.txt", "n"}}, "f2: rename and add");
  o.git.Run("checkout -q main");
  std::string m1 = o.git.Commit({{"README", "r"}}, "m1");

  auto m = Mirror::Open(Mirror::PathFor(o.data, o.url), o.url).value();
  REQUIRE(m.Fetch({}));
  CHECK(m.IsAncestor(base, f2).value());
  CHECK(m.IsAncestor(f2, f2).value());
  CHECK_FALSE(m.IsAncestor(m1, f2).value());
  CHECK(m.MergeBase(m1, f2).value() == base);
  CHECK(m.FirstParent(f2).value() == f1);
  CHECK_FALSE(m.FirstParent(base).value());
  CHECK(m.CommitsBetween(base, f2, 100).value() == std::vector<std::string>{f1, f2});
  CHECK(m.CommitsBetween("", f2, 100).value() == std::vector<std::string>{base, f1, f2});
  CHECK(m.CommitsBetween(base, f2, 1).value() == std::vector<std::string>{f2});  // newest kept
  CHECK(m.ResolveRef("refs/heads/feature").value() == f2);
  CHECK_FALSE(m.ResolveRef("refs/heads/nope").value());

  auto diff = m.Diff(f1, f2).value();
  REQUIRE(diff.size() == 2);
  CHECK(diff[0].kind == ChangedPath::Kind::kRenamed);
  CHECK(diff[0].old_path == "configs/a.yaml");
  CHECK(diff[0].new_path == "configs/renamed.yaml");
  CHECK(diff[1].kind == ChangedPath::Kind::kAdded);
  CHECK(diff[1].new_path == "new.txt");

  auto from_empty = m.Diff("", base).value();
  CHECK(from_empty.size() == 2);
  CHECK(from_empty[0].kind == ChangedPath::Kind::kAdded);
  auto modified = m.Diff(base, f1).value();
  REQUIRE(modified.size() == 1);
  CHECK(modified[0].kind == ChangedPath::Kind::kModified);
  CHECK(modified[0].new_path == "train.py");
}

TEST_CASE("mirror: a fetch prunes deleted branches and follows force pushes", "[mirror]") {
  Origin o;
  o.git.Commit({{"a", "1"}}, "one");
  o.git.Run("branch gone");
  std::string two = o.git.Commit({{"a", "2"}}, "two");
  auto m = Mirror::Open(Mirror::PathFor(o.data, o.url), o.url).value();
  REQUIRE(m.Fetch({}));
  CHECK(m.Refs().value().count("refs/heads/gone") == 1);
  o.git.Run("branch -D gone");
  o.git.Run("reset -q --hard HEAD~1");
  std::string rewritten = o.git.Commit({{"a", "3"}}, "rewritten");
  REQUIRE(m.Fetch({}));
  auto refs = m.Refs().value();
  CHECK(refs.count("refs/heads/gone") == 0);
  CHECK(refs["refs/heads/main"] == rewritten);
  CHECK(m.HasCommit(two));  // objects are only ever added
}

TEST_CASE("mirror: a failed fetch is kUnavailable and names the url", "[mirror]") {
  testing::TempDir tmp;
  std::string url = "file://" + (tmp / "does-not-exist");
  auto m = Mirror::Open(Mirror::PathFor(tmp / "data", url), url).value();
  auto st = m.Fetch({});
  REQUIRE_FALSE(st);
  CHECK(st.error().kind == ErrorKind::kUnavailable);
  CHECK(st.error().message.find("does-not-exist") != std::string::npos);
}

TEST_CASE("mirror: a fetch goes to its url as given, whatever url.insteadOf the git config holds",
          "[mirror]") {
  // Regression (ci/sanitize asan): the insteadOf lookup of libgit2 1.5 leaks
  // ~20 KiB per config entry it does not match, every fetch; Fetch skips it.
  Origin o;
  std::string c1 = o.git.Commit({{"trainq.yaml", "v1"}}, "one");
  std::string path = Mirror::PathFor(o.data, o.url);
  auto m = Mirror::Open(path, o.url);
  REQUIRE(m);
  auto config = ReadFile(path + "/config");
  REQUIRE(config);
  REQUIRE(WriteFile(path + "/config",
                    *config + "[url \"file:///nonexistent-trainq-test/\"]\n\tinsteadOf = file://\n"));
  auto st = m->Fetch({});
  INFO((st ? "" : st.error().message));
  REQUIRE(st);
  CHECK(m->HasCommit(c1));
}

TEST_CASE("mirror: https-style fetch sends the token as basic auth, and never shows it",
          "[mirror]") {
  if (!GitSupportsHttps()) {
    WARN("libgit2 without HTTP support: skipped");
    return;
  }
  // A server that always asks for credentials: libgit2 must answer with the token.
  // (No body with the 401: libgit2 1.5 sometimes fails to parse one, "http
  // parser error: invalid".)
  testing::TestHttpServer server([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{401, "", {{"WWW-Authenticate", "Basic realm=\"x\""}}};
  });
  testing::TempDir tmp;
  std::string url = server.url() + "/acme/model.git";
  auto m = Mirror::Open(Mirror::PathFor(tmp / "data", url), url).value();
  auto st = m.Fetch({"x-access-token", "tok-SECRET-123", ""});
  REQUIRE_FALSE(st);
  CHECK(st.error().kind == ErrorKind::kUnavailable);
  CHECK(st.error().message.find("tok-SECRET-123") == std::string::npos);
  bool sent = false;
  INFO(st.error().message);
  for (const auto& r : server.requests()) {
    UNSCOPED_INFO(r.method << " " << r.target << " auth=" << r.Header("Authorization"));
    // base64("x-access-token:tok-SECRET-123")
    if (r.Header("Authorization") == "Basic eC1hY2Nlc3MtdG9rZW46dG9rLVNFQ1JFVC0xMjM=") sent = true;
  }
  CHECK(sent);
}

}  // namespace
}  // namespace trainq
