// The server config file: defaults, secrets from env or file, and errors that
// name file:line:key without ever showing a secret.
#include "agent/triggers/server_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "agent/triggers/database_config.h"
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
      {"repositories:\n  - url: x\n    pull_requests: false\n    fork_pull_requests: true\n",
       "server.yaml:4: repositories[0].fork_pull_requests: needs `pull_requests: true`"},
      {"repositories:\n  - url: https://github.com/a/b\n    forge: github\n    pr_comments: true\n",
       "server.yaml:4: repositories[0].pr_comments: needs `token` for the forge's API"},
      {"repositories:\n  - url: x\n    pull_requests: sometimes\n",
       "server.yaml:3: repositories[0].pull_requests: expected true or false"},
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

TEST_CASE("server config: database: a URL, or a URL with its password from a file",
          "[server_config]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "pg-password", "pg-s3cret-value\n"));
  auto load = [&](const std::string& yaml) {
    REQUIRE(WriteFile(tmp / "server.yaml", yaml));
    REQUIRE(ParseServerConfig(yaml, tmp / "server.yaml"));  // accepted by the whole parse too
    auto d = LoadDatabaseConfig(tmp / "server.yaml");
    REQUIRE(d);
    REQUIRE(d->has_value());
    return **d;
  };
  auto plain = load("database: postgres://trainq@db.example:5432/trainq?sslmode=verify-full\n");
  CHECK(plain.url == "postgres://trainq@db.example:5432/trainq?sslmode=verify-full");
  CHECK(plain.password.empty());
  auto file = load("database:\n  url: postgres://trainq@db/trainq\n  password: {file: " +
                   (tmp / "pg-password") + "}\n");
  CHECK(file.url == "postgres://trainq@db/trainq");
  CHECK(file.password.value == "pg-s3cret-value");
  CHECK(file.password.source == "file " + (tmp / "pg-password"));
  // The password file is one of the paths runs must not see.
  auto whole = ParseServerConfig(
      "database:\n  url: postgres://trainq@db/trainq\n  password: {file: " + (tmp / "pg-password") +
          "}\n",
      "server.yaml");
  REQUIRE(whole);
  CHECK(std::find(whole->named_paths.begin(), whole->named_paths.end(), tmp / "pg-password") !=
        whole->named_paths.end());
  CHECK(load("database: /var/lib/trainq/trainq.db\n").url == "/var/lib/trainq/trainq.db");
  REQUIRE(WriteFile(tmp / "none.yaml", "listen: 127.0.0.1:9000\n"));
  auto none = LoadDatabaseConfig(tmp / "none.yaml");
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"database: postgres://trainq:hunter2@db/trainq\n",
       "server.yaml:1: database: a password in the URL (postgres://trainq:***@db/trainq) "
       "belongs in a file"},
      {"database:\n  url: postgres://u@db/t?password=hunter2\n",
       "server.yaml:2: database.url: a password in the URL (postgres://u@db/t?password=***)"},
      {"database:\n  url: postgres://u@db/t\n  password: hunter2\n",
       "server.yaml:3: database.password: expected {env: VARIABLE} or {file: PATH}"},
      {"database:\n  password: {file: /x}\n", "server.yaml:2: database.url: missing"},
      {"database:\n  url: q.db\n  password: {env: SC_DB_PW}\n",
       "server.yaml:3: database.password: a password is for a postgres:// URL"},
      {"database:\n  url: postgres://u@db/t\n  pasword: {file: /x}\n",
       "server.yaml:3: database.pasword: unknown key"},
      {"database: [a]\n", "server.yaml:1: database: expected a postgres:// URL"},
  };
  Env pw("SC_DB_PW", "hunter2");
  for (const auto& c : cases) {
    INFO(c.yaml);
    auto r = ParseServerConfig(c.yaml, "server.yaml");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::StartsWith(c.message));
    CHECK(r.error().message.find("hunter2") == std::string::npos);
  }
}

TEST_CASE("server config: pools with every key, and the defaults", "[server_config]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "gpu.token", "pool-token-value\n"));
  auto c = ParseServerConfig(R"(pools:
  - name: gpu
    provider: slurm
    min: 1
    max: 4
    slots: 2
    gpus: 1
    runs_per_gpu: 2
    fuse_max: 10
    idle_grace: 90s
    boot_timeout: 15m
    orphan_timeout: 20m
    self_stop: "sudo shutdown -h now"
    hourly_cost: 2.5
    token: {file: )" + (tmp / "gpu.token") + R"(}
    params: {partition: gpu, gres: "gpu:1", time: "4:00:00", cpus: 8}
  - name: cpu-2
)",
                             "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  REQUIRE(c->pools.size() == 2);
  const PoolSpec& g = c->pools[0];
  CHECK(g.name() == "gpu");
  CHECK(g.provider == "slurm");
  CHECK(g.scaling.min == 1);
  CHECK(g.scaling.max == 4);
  CHECK(g.scaling.slots == 2);
  CHECK(g.gpus == 1);
  CHECK(g.runs_per_gpu == 2);
  CHECK(g.fuse_max == 10);
  CHECK(c->pools[1].fuse_max == 1);
  CHECK(g.scaling.idle_grace_ms == 90'000);
  CHECK(g.scaling.boot_timeout_ms == 15 * 60'000);
  CHECK(g.orphan_timeout_ms == 20 * 60'000);
  CHECK(g.self_stop == "sudo shutdown -h now");
  CHECK(g.scaling.hourly_cost == Approx(2.5));
  CHECK(g.token.value == "pool-token-value");
  CHECK(g.line == 2);
  CHECK(g.params == std::map<std::string, std::string>{
                        {"partition", "gpu"}, {"gres", "gpu:1"}, {"time", "4:00:00"}, {"cpus", "8"}});
  const PoolSpec& d = c->pools[1];
  CHECK(d.name() == "cpu-2");
  CHECK(d.provider == "local");
  CHECK(d.scaling.min == 0);
  CHECK(d.scaling.max == 1);
  CHECK(d.scaling.slots == 1);
  CHECK(d.token.empty());
  CHECK(c->FindPool("cpu-2") == &c->pools[1]);
}

TEST_CASE("server config: pool errors name file, line and key", "[server_config]") {
  Env secret("SC_TEST_POOL_SECRET", "do-not-print-me");
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"pools:\n  - max: 2\n", "server.yaml:2: pools[0].name: missing"},
      {"pools:\n  - name: GPU\n", "server.yaml:2: pools[0].name: only lowercase letters"},
      {"pools:\n  - name: a_b\n", "server.yaml:2: pools[0].name: only lowercase letters"},
      {"pools:\n  - name: gpu\n  - name: gpu\n", "server.yaml:3: pools[1].name: pool gpu is listed twice"},
      {"pools:\n  - name: gpu\n    provider: gce\n",
       "server.yaml:3: pools[0].provider: expected local, slurm, ec2, kubernetes or command, got \"gce\""},
      {"pools:\n  - name: gpu\n    min: 3\n    max: 2\n",
       "server.yaml:3: pools[0].min: min (3) is above max (2)"},
      {"pools:\n  - name: gpu\n    slots: 0\n",
       "server.yaml:3: pools[0].slots: expected a whole number >= 1, got \"0\""},
      {"pools:\n  - name: gpu\n    fuse_max: 0\n",
       "server.yaml:3: pools[0].fuse_max: expected a whole number >= 1, got \"0\""},
      {"pools:\n  - name: gpu\n    max: lots\n",
       "server.yaml:3: pools[0].max: expected a whole number >= 0"},
      {"pools:\n  - name: gpu\n    idle_grace: soon\n", "server.yaml:3: pools[0].idle_grace:"},
      {"pools:\n  - name: gpu\n    hourly_cost: -1\n",
       "server.yaml:3: pools[0].hourly_cost: expected a cost >= 0"},
      {"pools:\n  - name: gpu\n    sltos: 2\n", "server.yaml:3: pools[0].sltos: unknown key"},
      {"pools:\n  - name: gpu\n    token: {env: SC_TEST_POOL_SECRET}\n    params: [1]\n",
       "server.yaml:4: pools[0].params: expected a mapping"},
      {"pools:\n  - name: gpu\n    token: literal\n",
       "server.yaml:3: pools[0].token: expected {env: VARIABLE} or {file: PATH}"},
      {"pools:\n  - name: gpu\n    provider: ec2\n    params:\n      image: ami-1\n"
       "      instance_type: g5.xlarge\n",
       "server.yaml:4: pools[0] (ec2 pool gpu): params.region: required by ec2"},
      {"pools:\n  - name: gpu\n    provider: slurm\n    params:\n      partition: gpu\n"
       "      partiton: gpu\n",
       "server.yaml:6: pools[0] (slurm pool gpu): params.partiton: unknown to slurm"},
      {"pools:\n  - name: gpu\n    provider: command\n    params: {boot: x, list: y}\n",
       "server.yaml:4: pools[0] (command pool gpu): params.stop: required by command"},
      {"pools:\n  - name: gpu\n    params: {tags: {a: b}}\n",
       "server.yaml:3: pools[0].params.tags: expected a string or number"},
      {"pools:\n  - name: gpu\n    provider: kubernetes\n    params:\n      image: w\n"
       "      node_selektor: {a: b}\n",
       "server.yaml:6: pools[0] (kubernetes pool gpu): params.node_selektor: unknown to kubernetes"},
      {"pools:\n  - name: gpu\n    provider: kubernetes\n    params:\n      image: w\n"
       "      tolerations:\n        - {key: a, effekt: NoSchedule}\n",
       "server.yaml:6: pools[0] (kubernetes pool gpu): params.tolerations[0].effekt: unknown key"},
      {"pools:\n  - name: gpu\n    provider: kubernetes\n    params:\n      namespace: ml\n",
       "server.yaml:4: pools[0] (kubernetes pool gpu): params.image: required by kubernetes"},
      {"pools: {name: gpu}\n", "server.yaml:1: pools: expected a list"},
      // An API server over plain HTTP sends the pool's bearer token in clear.
      {"pools:\n  - name: gpu\n    provider: kubernetes\n    params:\n      image: w\n"
       "      api_server: http://k8s.example:8080\n",
       "server.yaml:6: pools[0] (kubernetes pool gpu): params.api_server: "
       "http://k8s.example:8080 is plain HTTP"},
      {"pools:\n  - name: gpu\n    provider: kubernetes\n    params:\n      image: w\n"
       "      api_server: http://k8s.example:8080\n      allow_insecure: yes please\n",
       "server.yaml:7: pools[0] (kubernetes pool gpu): params.allow_insecure: expected true or "
       "false"},
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

TEST_CASE("server config: a remote pool whose workers would get a loopback or unspecified "
          "server URL is refused, naming file:line:key and what to set", "[server_config]") {
  // ec2 and command pools (and slurm, whose jobs run on compute nodes) boot
  // machines elsewhere: 127.0.0.1 there is the machine itself.
  const std::string ec2 =
      "pools:\n"
      "  - name: gpu\n"
      "    provider: ec2\n"
      "    params:\n"
      "      region: us-east-1\n"
      "      image: ami-1\n"
      "      instance_type: g5.xlarge\n";
  const std::string command =
      "pools:\n"
      "  - name: site\n"
      "    provider: command\n"
      "    params: {boot: b, list: l, stop: s}\n";
  struct Case {
    std::string yaml, default_url, message;
  };
  std::vector<Case> refused = {
      {ec2, "http://127.0.0.1:8080",
       "server.yaml:2: pools[0] (ec2 pool gpu): no params.server_url, so workers would connect "
       "to http://127.0.0.1:8080 (from the listen address 0.0.0.0:8080), which a machine "
       "elsewhere cannot reach"},
      {command, "http://127.0.0.1:8080",
       "server.yaml:2: pools[0] (command pool site): no params.server_url"},
      {ec2 + "      server_url: http://localhost:8080\n", "http://10.0.0.5:8080",
       "server.yaml:8: pools[0].params.server_url (ec2 pool gpu): workers would connect to "
       "http://localhost:8080"},
      {ec2 + "      server_url: http://0.0.0.0:8080\n", "http://10.0.0.5:8080",
       "server.yaml:8: pools[0].params.server_url"},
      {ec2 + "      server_url: \"http://[::]:8080\"\n", "http://10.0.0.5:8080",
       "server.yaml:8: pools[0].params.server_url"},
      {command + "    allow_loopback: false\n", "http://[::1]:8080",
       "server.yaml:2: pools[0] (command pool site)"},
  };
  for (const auto& c : refused) {
    INFO(c.yaml);
    auto config = ParseServerConfig(c.yaml, "server.yaml");
    REQUIRE(config);
    auto st = CheckWorkerUrls(*config, c.default_url, "0.0.0.0:8080");
    REQUIRE_FALSE(st);
    CHECK(st.error().kind == ErrorKind::kInvalidArgument);
    CHECK_THAT(st.error().message, Catch::StartsWith(c.message));
    // It says what to set.
    CHECK_THAT(st.error().message, Catch::Contains("Set params.server_url"));
    CHECK_THAT(st.error().message, Catch::Contains("allow_loopback: true"));
  }

  std::vector<Case> accepted = {
      {ec2, "http://10.0.0.5:8080", ""},                                   // listens beyond loopback
      {ec2 + "      server_url: http://trainq.internal:8080\n", "http://127.0.0.1:8080", ""},
      {ec2 + "    allow_loopback: true\n", "http://127.0.0.1:8080", ""},  // a local test
      {command + "    allow_loopback: true\n", "http://127.0.0.1:8080", ""},
      {"pools:\n  - name: cpu\n    provider: local\n", "http://127.0.0.1:8080", ""},
      {"pools:\n  - name: cpu\n", "http://127.0.0.1:8080", ""},
  };
  for (const auto& c : accepted) {
    INFO(c.yaml << " with " << c.default_url);
    auto config = ParseServerConfig(c.yaml, "server.yaml");
    REQUIRE(config);
    auto st = CheckWorkerUrls(*config, c.default_url, "127.0.0.1:8080");
    CHECK(st);
    if (!st) FAIL(st.error().message);
  }
  auto bad = ParseServerConfig(command + "    allow_loopback: maybe\n", "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::StartsWith("server.yaml:5: pools[0].allow_loopback: "
                                                    "expected true or false"));
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

TEST_CASE("server config: a pool's env_passthrough, and its errors", "[server_config]") {
  auto c = ParseServerConfig("pools:\n  - name: gpu\n    env_passthrough: [WANDB_API_KEY, \"CONDA_*\"]\n",
                             "server.yaml");
  REQUIRE(c);
  CHECK(c->pools.at(0).env_passthrough == std::vector<std::string>{"WANDB_API_KEY", "CONDA_*"});
  auto bad = ParseServerConfig("pools:\n  - name: gpu\n    env_passthrough: [\"A B\"]\n",
                               "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.starts_with("server.yaml:3: pools[0].env_passthrough[0]: expected a "
                                        "variable name"));
  auto scalar = ParseServerConfig("pools:\n  - name: gpu\n    env_passthrough: HOME\n",
                                  "server.yaml");
  REQUIRE_FALSE(scalar);
  CHECK(scalar.error().message.find("pools[0].env_passthrough: expected a list") !=
        std::string::npos);
}

TEST_CASE("server config: pull requests: same-repository ones on, forks off, comments with "
          "statuses",
          "[server_config][pr]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "token", "t\n"));
  auto c = ParseServerConfig("repositories:\n"
                             "  - url: https://github.com/acme/model.git\n"
                             "    forge: github\n"
                             "    token: {file: " + (tmp / "token") + "}\n"
                             "    status: true\n"
                             "  - url: https://github.com/acme/open.git\n"
                             "    forge: github\n"
                             "    token: {file: " + (tmp / "token") + "}\n"
                             "    fork_pull_requests: true\n"
                             "    pr_comments: true\n"
                             "    report_url: https://ci.example/report.html\n"
                             "  - url: https://github.com/acme/quiet.git\n"
                             "    status: false\n"
                             "    pull_requests: false\n",
                             "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  const auto& model = c->repositories[0];
  CHECK(model.pull_requests);
  CHECK_FALSE(model.fork_pull_requests);
  CHECK(model.pr_comments);  // follows status
  CHECK(model.report_url.empty());
  const auto& open = c->repositories[1];
  CHECK(open.fork_pull_requests);
  CHECK(open.pr_comments);
  CHECK(open.report_url == "https://ci.example/report.html");
  const auto& quiet = c->repositories[2];
  CHECK_FALSE(quiet.pull_requests);
  CHECK_FALSE(quiet.pr_comments);
}

TEST_CASE("server config: read_token from env or file, separate from the repositories' secrets",
          "[server_config]") {
  testing::TempDir tmp;
  Env env("SC_TEST_READ_TOKEN", "read-s3cret");
  auto c = ParseServerConfig("read_token: {env: SC_TEST_READ_TOKEN}\n", "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  CHECK(c->read_token.value == "read-s3cret");
  CHECK(c->read_token.source == "env SC_TEST_READ_TOKEN");
  CHECK(c->repositories.empty());

  REQUIRE(WriteFile(tmp / "read.token", "from-file\n"));
  auto f = ParseServerConfig("read_token: {file: " + (tmp / "read.token") + "}\n", "server.yaml");
  REQUIRE(f);
  CHECK(f->read_token.value == "from-file");

  // Not configured: empty (the read routes answer 403).
  CHECK(ParseServerConfig("listen: 127.0.0.1:1\n", "server.yaml")->read_token.empty());

  // A literal value is refused without being echoed; an unset variable is named.
  auto literal = ParseServerConfig("listen: 127.0.0.1:1\nread_token: hunter2\n", "server.yaml");
  REQUIRE_FALSE(literal);
  CHECK(literal.error().message.starts_with("server.yaml:2: read_token: expected {env: VARIABLE}"));
  CHECK(literal.error().message.find("hunter2") == std::string::npos);
  auto unset = ParseServerConfig("read_token: {env: SC_TEST_NOT_SET}\n", "server.yaml");
  REQUIRE_FALSE(unset);
  CHECK(unset.error().message ==
        "server.yaml:1: read_token.env: environment variable SC_TEST_NOT_SET is not set or empty");
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// Every scalar of `node` that names a file the test made (under `dir`).
void FilesUnder(const YAML::Node& node, const std::string& dir, std::set<std::string>& out) {
  if (node.IsScalar()) {
    if (node.Scalar().starts_with(dir)) out.insert(node.Scalar());
  } else if (node.IsSequence() || node.IsMap()) {
    for (const auto& e : node) {
      if (node.IsMap()) {
        FilesUnder(e.second, dir, out);
      } else {
        FilesUnder(e, dir, out);
      }
    }
  }
}

TEST_CASE(
    "server config: every file the config names is in named_paths, the runs' hide list, "
    "whatever key names it (fault probe t10: admin_token, credentials_file, "
    "api_token_file, kubeconfig)",
    "[server_config][sandbox]") {
  testing::TempDir tmp;
  for (const char* f : {"hook.secret", "forge.token", "deploy_key", "read.token", "admin.token",
                        "local.token", "worker.token", "aws.credentials", "kube.token",
                        "kubeconfig", "future.token", "future_key"}) {
    REQUIRE(WriteFile(tmp / f, "x\n"));
  }
  // The public CA bundle stays visible (runs download over TLS with it).
  REQUIRE(WriteFile(tmp / "ca.crt", "-----BEGIN CERTIFICATE-----\n"));
  const std::string text = R"(read_token: {file: )" + (tmp / "read.token") + R"(}
admin_token: {file: )" + (tmp / "admin.token") +
                           R"(}
repositories:
  - url: https://github.com/acme/model.git
    forge: github
    secret: {file: )" + (tmp / "hook.secret") +
                           R"(}
    token: {file: )" + (tmp / "forge.token") +
                           R"(}
    ssh_key: )" + (tmp / "deploy_key") +
                           R"(
pools:
  - name: local
    provider: local
    token: {file: )" + (tmp / "local.token") +
                           R"(}
    params: {token_file: )" +
                           (tmp / "worker.token") + R"(}
  - name: cloud
    provider: ec2
    params: {region: eu-west-1, image: ami-1, instance_type: g5.xlarge,
             credentials_file: )" +
                           (tmp / "aws.credentials") + R"(}
  - name: kube
    provider: kubernetes
    params: {image: "r.example/w:1", api_server: "https://kube.example:6443",
             api_token_file: )" +
                           (tmp / "kube.token") + R"(, ca_file: )" + (tmp / "ca.crt") + R"(}
  - name: kube2
    provider: kubernetes
    params: {image: "r.example/w:1", kubeconfig: )" +
                           (tmp / "kubeconfig") + R"(}
)";
  auto c = ParseServerConfig(text, "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  std::set<std::string> hidden(c->named_paths.begin(), c->named_paths.end());
  // The walk over the same document finds every path the test wrote into it:
  // each must be hidden, but the CA bundle.
  auto root = YAML::Load(text);
  std::set<std::string> named;
  FilesUnder(root, tmp.path().string(), named);
  CHECK(named.size() == 11);
  for (const auto& f : named) {
    INFO(f);
    if (f == tmp / "ca.crt") {
      CHECK_FALSE(hidden.contains(f));
    } else {
      CHECK(hidden.contains(f));
    }
  }
  // A key added later is covered by its name, wherever it sits.
  auto later = ConfigNamedPaths(
      YAML::Load("notify:\n  - slack: {webhook_url: {file: " + (tmp / "future.token") +
                 "}}\n    signing_key: " + (tmp / "future_key") + "\n"));
  CHECK(later == std::vector<std::string>{tmp / "future.token", tmp / "future_key"});
}

}  // namespace
}  // namespace trainq
