// The server config file: defaults, secrets from env or file, and errors that
// name file:line:key without ever showing a secret.
#include "agent/server_config.h"

#include <catch2/catch.hpp>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

struct Env {
  Env(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_); }
  const char* name_;
};

TEST_CASE("server config: a full repository entry and the defaults", "[server_config]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "token", "ghp_tokenvalue\n"));
  Env secret("SC_TEST_SECRET", "s3cret");
  auto c = ParseServerConfig(R"(listen: 127.0.0.1:9000
repositories:
  - url: https://github.com/acme/model.git
    forge: github
    branches: [main, "release/*"]
    secret: {env: SC_TEST_SECRET}
    token: {file: )" + (tmp / "token") + R"(}
    status: true
    poll_interval: 5m
    per_commit: true
    tags: true
  - url: file:///srv/git/local.git
)",
                             "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  CHECK(c->listen == "127.0.0.1:9000");
  REQUIRE(c->repositories.size() == 2);
  const auto& r = c->repositories[0];
  CHECK(r.forge == ForgeKind::kGithub);
  CHECK(r.project == "acme/model");
  CHECK(r.branches == std::vector<std::string>{"main", "release/*"});
  CHECK(r.secret.value == "s3cret");
  CHECK(r.secret.source == "env SC_TEST_SECRET");
  CHECK(r.token.value == "ghp_tokenvalue");  // trailing newline dropped
  CHECK(r.api_url == "https://api.github.com");
  CHECK(r.username == "x-access-token");
  CHECK(r.status);
  CHECK(r.status_context == "trainq");
  CHECK(r.poll_interval_s == 300);
  CHECK(r.per_commit);
  CHECK(r.tags);
  CHECK(r.line == 3);
  CHECK(r.Watches("refs/heads/main"));
  CHECK(r.Watches("refs/heads/release/1.2"));
  CHECK_FALSE(r.Watches("refs/heads/feature/x"));
  CHECK(r.Watches("refs/tags/v1"));

  const auto& d = c->repositories[1];
  CHECK(d.forge == ForgeKind::kNone);
  CHECK(d.branches == std::vector<std::string>{"**"});
  CHECK(d.Watches("refs/heads/feature/deep/x"));
  CHECK_FALSE(d.Watches("refs/tags/v1"));  // tags off by default
  CHECK_FALSE(d.status);
  CHECK(d.poll_interval_s == 0);
  CHECK(c->FindRepo("/srv/git/local") == &d);
  CHECK(c->FindRepo("git@github.com:acme/model") == &r);
  CHECK(c->FindRepo("https://github.com/acme/other") == nullptr);
}

TEST_CASE("server config: errors name file, line and key, never a secret", "[server_config]") {
  Env secret("SC_TEST_SECRET2", "do-not-print-me");
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"repositories:\n  - url: x\n    secret: literal-secret\n",
       "server.yaml:3: repositories[0].secret: expected {env: VARIABLE} or {file: PATH} (the value "
       "itself does not belong in the config file)"},
      {"repositories:\n  - url: x\n    forge: github\n    secret: {env: SC_NOT_SET_ANYWHERE}\n",
       "server.yaml:4: repositories[0].secret.env: environment variable SC_NOT_SET_ANYWHERE is not "
       "set or empty"},
      {"repositories:\n  - url: x\n    forge: github\n    secret: {file: /nonexistent/secret}\n",
       "server.yaml:4: repositories[0].secret.file: cannot read /nonexistent/secret"},
      {"repositories:\n  - url: x\n    forge: bitbucket\n",
       "server.yaml:3: repositories[0].forge: expected github, gitlab, gitea or none, got "
       "\"bitbucket\""},
      {"repositories:\n  - forge: github\n", "server.yaml:2: repositories[0].url: missing"},
      {"repositories:\n  - url: x\n    brnaches: [main]\n",
       "server.yaml:3: repositories[0].brnaches: unknown key"},
      {"repositories:\n  - url: https://github.com/a/b\n    forge: github\n    status: true\n",
       "server.yaml:4: repositories[0].status: needs `token` for the forge's API"},
      {"repositories:\n  - url: x\n    secret: {env: SC_TEST_SECRET2}\n",
       "server.yaml:3: repositories[0].secret: webhooks need `forge`"},
      {"repositories:\n  - url: x\n    poll_interval: often\n",
       "server.yaml:3: repositories[0].poll_interval:"},
      {"repositories:\n  - url: https://a/b\n  - url: https://A/b.git\n",
       "server.yaml:3: repositories[1].url: listed twice"},
      {"repositories: {url: x}\n", "server.yaml:1: repositories: expected a list"},
      {"repositories:\n  - url: x\n    tags: maybe\n",
       "server.yaml:3: repositories[0].tags: expected true or false, got \"maybe\""},
      {"listen: [1]\n", "server.yaml:1: listen: expected a non-empty string"},
      {"repositories: [\n", "server.yaml:2: not valid YAML"},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    auto r = ParseServerConfig(c.yaml, "server.yaml");
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == ErrorKind::kInvalidArgument);
    CHECK_THAT(r.error().message, Catch::StartsWith(c.message));
    CHECK(r.error().message.find("do-not-print-me") == std::string::npos);
  }
}

TEST_CASE("server config: LoadServerConfig reads the file, an empty file is an empty config",
          "[server_config]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "empty.yaml", ""));
  auto c = LoadServerConfig(tmp / "empty.yaml");
  REQUIRE(c);
  CHECK(c->repositories.empty());
  auto missing = LoadServerConfig(tmp / "missing.yaml");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.starts_with("--config: "));
}

}  // namespace
}  // namespace trainq
