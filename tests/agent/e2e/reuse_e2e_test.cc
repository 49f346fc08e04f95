// End to end, with the real binary, real git and signed GitHub webhooks to a
// running `trainq serve` (issue 27):
//   - a pull request that touches no experiment (README only) is decided:
//     a success status per experiment, and `trainq gate --wait 60m` over
//     --server returns 0 at once;
//   - a new push to a pull request whose inputs for an experiment did not
//     change queues nothing: the head reuses the previous head's batch, and
//     the comment and status say so;
//   - `trainq submit` queues only the experiments whose inputs have no batch
//     yet, and `--rerun` queues them anyway.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/triggers/forge.h"
#include "core/crypto.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/pushes.h"
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

// A command whose stdout is compared or parsed: its log lines (stderr) are left out
// (RunShell adds 2>&1 after the command).
std::string StdoutOnly(const std::string& command) { return "{ " + command + " 2>/dev/null; }"; }

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
const char* kRun = R"(echo "training $1 seed $2"
lr=$(sed -n 's/^lr: //p' "configs/$1.yaml")
printf '{"name": "accuracy", "value": 0.%s%s}\n' "$lr" "$2" >> "$TRAINQ_METRICS_FILE"
)";

std::string Fixture(const std::string& path) {
  auto text = ReadFile(std::string(TRAINQ_SOURCE_DIR) + "/tests/fixtures/" + path);
  REQUIRE(text);
  return *text;
}

// GitHub's pull_request event (tests/fixtures), pointed at our repository.
std::string PrPayload(bool sync, int n, const std::string& sha, const std::string& origin_url) {
  json j = json::parse(Fixture(sync ? "github/pull_request_synchronize.json"
                                    : "github/pull_request_opened.json"));
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
  return j.dump();
}

std::string PushPayload(const std::string& before, const std::string& after,
                        const std::string& origin_url) {
  json j = {{"ref", "refs/heads/main"}, {"before", before}, {"after", after}};
  j["repository"] = {
      {"clone_url", origin_url}, {"full_name", "test/origin"}, {"default_branch", "main"}};
  return j.dump();
}

// A served repository on a bare origin with a fake GitHub API, main at A
// (both experiments run there and ended).
struct Served {
  testing::TempDir tmp;
  std::string secret = "reuse-e2e-secret";
  std::string origin;
  std::string origin_url;
  std::atomic<int> next_id{500};
  testing::TestHttpServer forge{[this](const testing::TestHttpRequest& r) {
    if (r.method == "POST" && r.target.find("/statuses/") == std::string::npos) {
      return testing::TestHttpResponse{201, json{{"id", next_id++}, {"body", "x"}}.dump(), {}};
    }
    return testing::TestHttpResponse{r.method == "POST" ? 201 : 200, "{}", {}};
  }};
  std::unique_ptr<GitCli> work;
  std::string a;
  std::string db;
  std::string base_url;
  testing::Daemon daemon;
  CurlHttpClient http;
  int deliveries = 0;

  void Start() {
    REQUIRE(WriteFile(tmp / "secret", secret + "\n"));
    REQUIRE(WriteFile(tmp / "token", "reuse-e2e-token\n"));
    REQUIRE(WriteFile(tmp / "read.token", "reuse-e2e-read\n"));
    origin = tmp / "origin.git";
    GitCli::InitBare(origin);
    origin_url = "file://" + origin;
    work = std::make_unique<GitCli>(tmp / "work");
    a = work->Commit({{"trainq.yaml", kManifest},
                      {"run.sh", kRun},
                      {"README.md", "# model\n"},
                      {"configs/a.yaml", "lr: 5\n"},
                      {"configs/b.yaml", "lr: 6\n"}},
                     "base");
    work->Run("remote add origin " + ShellQuote(origin));
    work->Run("push -q origin main");
    // clang-format off
    REQUIRE(WriteFile(tmp / "server.yaml",
                      "read_token: {file: " + (tmp / "read.token") + "}\n"
                      "repositories:\n"
                      "  - url: " + origin_url + "\n"
                      "    forge: github\n"
                      "    project: test/origin\n"
                      "    branches: [main]\n"
                      "    secret: {file: " + (tmp / "secret") + "}\n"
                      "    token: {file: " + (tmp / "token") + "}\n"
                      "    api_url: " + forge.url() + "\n"
                      "    status: true\n"));
    // clang-format on
    db = testing::StoreLocation(tmp, "trainq.db");
    int port = testing::FreeLoopbackPort();
    base_url = "http://127.0.0.1:" + std::to_string(port);
    REQUIRE(daemon.ServeWithConfig(db, tmp / "server.yaml", port, tmp.path()));
    REQUIRE(Send(false, PushPayload(std::string(kZeroSha), a, origin_url)).status == 202);
    bool ran = testing::WaitFor([&] { return BatchesAt(a).size() == 2 && AllEnded(a); }, 60s);
    if (!ran) FAIL(Log());
  }

  HttpResponse Send(bool pr, const std::string& body) {
    std::string delivery = "d-" + std::to_string(++deliveries);
    HttpHeaders h = {{"X-GitHub-Event", pr ? "pull_request" : "push"},
                     {"X-GitHub-Delivery", delivery},
                     {"X-Hub-Signature-256", "sha256=" + HmacSha256Hex(secret, body)}};
    auto r = http.Send({"POST", base_url + "/hooks/github", h, body, 5000});
    REQUIRE(r);
    return *r;
  }
  std::vector<BatchProgress> BatchesAt(const std::string& sha) {
    auto store = Store::Open(db).value();
    std::vector<BatchProgress> out;
    auto all = store.runs().Batches(false, 0).value();
    for (auto& b : all) {
      if (b.sha == sha) out.push_back(std::move(b));
    }
    return out;
  }
  bool AllEnded(const std::string& sha) {
    auto bs = BatchesAt(sha);
    if (bs.empty()) return false;
    for (const auto& b : bs) {
      if (b.active()) return false;
    }
    return true;
  }
  std::int64_t RunCount() {
    auto store = Store::Open(db).value();
    return static_cast<std::int64_t>(store.runs().Runs(std::nullopt, std::nullopt, 0).value().size());
  }
  bool PushDone(const std::string& sha) {
    auto store = Store::Open(db).value();
    auto pushes = store.pushes().PushesForCommit(sha).value();
    return !pushes.empty() && pushes.front().state == "done";
  }
  // The statuses the fake forge accepted for `sha`: context -> "state description".
  std::map<std::string, std::string> StatusesOf(const std::string& sha) {
    std::map<std::string, std::string> out;
    for (const auto& r : forge.requests()) {
      if (r.target != "/repos/test/origin/statuses/" + sha) continue;
      auto j = json::parse(r.body);
      out[j["context"].get<std::string>()] =
          j["state"].get<std::string>() + " " + j.value("description", "");
    }
    return out;
  }
  std::string LastComment() {
    std::string body;
    for (const auto& r : forge.requests()) {
      if (r.target.find("/statuses/") != std::string::npos) continue;
      body = json::parse(r.body)["body"].get<std::string>();
    }
    return body;
  }
  std::string Log() { return ReadFile(tmp / "serve.log").value_or(""); }
  void Stop() {
    daemon.runner.KillGroup(daemon.pid, SIGTERM);
    auto exit = daemon.runner.Wait(daemon.pid);
    daemon.pid = 0;
    INFO("serve: " << exit.Describe() << "\n" << Log());
    CHECK(exit.ok());
  }
};

TEST_CASE(
    "e2e: a README-only pull request is decided: a success status per experiment, and gate "
    "--wait 60m returns 0 at once",
    "[server][e2e][pr][reuse]") {
  Served s;
  s.Start();
  std::int64_t runs_before = s.RunCount();

  s.work->Run("checkout -q -b feature");
  std::string d = s.work->Commit({{"README.md", "# model\n\nHow to train it.\n"}}, "docs");
  s.work->Run("push -q origin " + d + ":refs/pull/2/head");
  REQUIRE(s.Send(true, PrPayload(false, 2, d, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor([&] { return s.PushDone(d); }, 20s));
  INFO(s.Log());
  CHECK(s.BatchesAt(d).empty());
  CHECK(s.RunCount() == runs_before);

  // A green check per experiment: a required `trainq/a` check is satisfied.
  REQUIRE(testing::WaitFor([&] { return s.StatusesOf(d).size() == 2; }, 20s));
  auto statuses = s.StatusesOf(d);
  CHECK(statuses["trainq/a"] == "success no experiment changed");
  CHECK(statuses["trainq/b"] == "success no experiment changed");

  // The CI template's gate step: decided at once, not after the hour.
  std::string out;
  auto t0 = std::chrono::steady_clock::now();
  int code = testing::RunShell(std::string(TRAINQ_BINARY) + " gate " + d +
                                   " --baseline main --repo test/origin --server " + s.base_url +
                                   " --token-file " + ShellQuote(s.tmp / "read.token") +
                                   " --wait 60m 2>&1",
                               &out);
  auto took = std::chrono::steady_clock::now() - t0;
  INFO(out);
  CHECK(code == 0);
  CHECK(took < 1s);
  CHECK(out.find("no experiment changed at " + d) != std::string::npos);
  CHECK(out.find("nothing to judge") != std::string::npos);

  // The same from the database, by name, as `trainq gate HEAD --baseline HEAD~1`.
  code = testing::RunShell(StdoutOnly(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) +
                                    " gate HEAD --baseline HEAD~1 --repo " +
                                    ShellQuote(s.work->dir()) + " --wait 60m --json"),
                           &out);
  INFO(out);
  CHECK(code == 0);
  auto j = json::parse(out);
  CHECK(j["decision"] == "pass");
  CHECK(j["finished"] == true);
  CHECK(j["no_experiment_changed"] == true);

  // serve's log names its database, and every refused webhook with its reason.
  CHECK(s.Log().find("database " + s.db) != std::string::npos);
  auto bad = s.Send(false, PushPayload(s.a, "not-a-sha", s.origin_url));
  CHECK(bad.status == 400);
  REQUIRE(testing::WaitFor(
      [&] { return s.Log().find("github webhook refused (400): ") != std::string::npos; }, 10s));

  // A commit nothing processed stays undecided (exit 3), as before.
  std::string e = s.work->Commit({{"README.md", "# model\n\nUnpushed.\n"}}, "unpushed");
  code = testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) + " gate " +
                               e + " --baseline main --repo " + ShellQuote(s.work->dir()) + " 2>&1",
                           &out);
  INFO(out);
  CHECK(code == 3);
  s.Stop();
}

TEST_CASE(
    "e2e: a second push to a pull request with unchanged inputs queues nothing, and its comment "
    "and status show the reused batch",
    "[server][e2e][pr][reuse]") {
  Served s;
  s.Start();

  // Pull request 1 changes b (lr 6 -> 7: better).
  s.work->Run("checkout -q -b feature");
  std::string b = s.work->Commit({{"configs/b.yaml", "lr: 7\n"}}, "tune b");
  s.work->Run("push -q origin " + b + ":refs/pull/1/head");
  REQUIRE(s.Send(true, PrPayload(false, 1, b, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor([&] { return s.AllEnded(b); }, 60s));
  REQUIRE(testing::WaitFor(
      [&] { return s.LastComment().find("#### `b`: better") != std::string::npos; }, 60s));
  auto at_b = s.BatchesAt(b);
  REQUIRE(at_b.size() == 1);
  std::int64_t runs_before = s.RunCount();

  // A README-only commit on top: b's inputs are b's at the previous head.
  std::string c = s.work->Commit({{"README.md", "# model\n\nTuned b.\n"}}, "docs");
  s.work->Run("push -q -f origin " + c + ":refs/pull/1/head");
  REQUIRE(s.Send(true, PrPayload(true, 1, c, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor([&] { return s.PushDone(c); }, 20s));
  INFO(s.Log());
  CHECK(s.RunCount() == runs_before);  // nothing queued
  auto at_c = s.BatchesAt(c);
  REQUIRE(at_c.size() == 1);
  CHECK(at_c[0].experiment == "b");
  REQUIRE(at_c[0].reuses_batch_id);
  CHECK(*at_c[0].reuses_batch_id == at_b[0].id);
  CHECK(at_c[0].reused_from_sha == b);
  CHECK(at_c[0].values == at_b[0].values);  // the runs are the commit's own
  CHECK(s.Log().find(c.substr(0, 10) + ": reused b (batch " + std::to_string(at_b[0].id) +
                     " of " + b.substr(0, 10) + ")") != std::string::npos);

  // The comment is edited for the new head and says where its runs came from.
  REQUIRE(testing::WaitFor(
      [&] {
        std::string body = s.LastComment();
        return body.find("Head `" + c.substr(0, 10) + "`") != std::string::npos &&
               body.find("#### `b`: better") != std::string::npos;
      },
      30s));
  std::string body = s.LastComment();
  INFO(body);
  CHECK(body.find("Reused: the runs of batch " + std::to_string(at_b[0].id) + " at `" +
                  b.substr(0, 10) + "`") != std::string::npos);
  CHECK(body.find("| head | `" + c.substr(0, 10) + "` | 0.7200 ± 0.0100 | 3 |") !=
        std::string::npos);
  // The new head's status is final at once, with the verdict.
  REQUIRE(testing::WaitFor(
      [&] { return s.StatusesOf(c)["trainq/b"].starts_with("success accuracy 0.720"); }, 30s));
  CHECK(s.StatusesOf(c)["trainq/b"].find(": better") != std::string::npos);

  // The gate treats the reused batch as the head's own.
  std::string out;
  int code = testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) +
                                   " gate " + c + " --baseline main --repo " +
                                   ShellQuote(s.work->dir()) + " 2>&1",
                               &out);
  INFO(out);
  CHECK(code == 0);
  CHECK(out.find("[reused batch " + std::to_string(at_b[0].id) + " of " + b.substr(0, 7)) !=
        std::string::npos);

  // History views (issue 38.6): the report follows main's first parents, so
  // the unmerged pull request's head is not in it ...
  auto report = [&] {
    std::string dir = s.tmp / ("report-" + std::to_string(s.RunCount()) + "-" +
                               std::to_string(std::rand()));
    std::string text;
    REQUIRE(testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) +
                                  " report --out " + ShellQuote(dir) + " 2>&1",
                              &text) == 0);
    return json::parse(ReadFile(dir + "/report.json").value());
  };
  auto commits_of = [](const json& r, const std::string& exp) {
    std::vector<std::string> out;
    for (const auto& e : r["experiments"]) {
      if (e["experiment"] != exp) continue;
      for (const auto& bj : e["batches"]) out.push_back(bj["commit"]);
    }
    return out;
  };
  auto before = report();
  CHECK(commits_of(before, "b") == std::vector<std::string>{s.a});
  CHECK(before["off_branch"].get<int>() >= 2);  // b's batches at the two heads
  CHECK(before["branches"].dump().find("main") != std::string::npos);

  // ... the fast-forward merge of the pull request queues nothing and says
  // what its batch already is (not an empty note) ...
  s.work->Run("push -q origin " + c + ":refs/heads/main");
  REQUIRE(s.Send(false, PushPayload(s.a, c, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor(
      [&] {
        auto store = Store::Open(s.db).value();
        auto pushes = store.pushes().PushesForCommit(c).value();
        int done = 0;
        for (const auto& p : pushes) done += p.state == "done" && p.ref == "refs/heads/main";
        return done == 1;
      },
      20s));
  CHECK(s.RunCount() == runs_before);
  CHECK(s.Log().find(c.substr(0, 10) + ": already run b (batch " + std::to_string(at_c[0].id) +
                     ", the runs of batch " + std::to_string(at_b[0].id) + ")") !=
        std::string::npos);
  CHECK(s.Log().find(c.substr(0, 10) + ": \n") == std::string::npos);

  // ... and once merged, b's runs are listed once, at the head that ran
  // them, marked reused at the later head.
  auto after = report();
  CHECK(commits_of(after, "b") == std::vector<std::string>{s.a, b});
  for (const auto& e : after["experiments"]) {
    if (e["experiment"] != "b") continue;
    CHECK(e["batches"][1]["reused_at"] == json::array({c}));
    CHECK(e["batches"][1]["vs_parent"]["verdict"] == "better");
  }
  s.Stop();
}

// Issue 38.4, the push side: a push adding `determinism: check` to defaults
// was "no watched path or experiment changed", so the check never started.
// It starts now, on the reused runs; `correction:` alone still runs nothing.
TEST_CASE(
    "e2e: a push asking for a determinism check in defaults runs only the check on the reused "
    "runs, and a push changing only the correction runs nothing",
    "[server][e2e][reuse]") {
  Served s;
  s.Start();
  const std::int64_t runs_before = s.RunCount();
  auto defaults = [](const std::string& keys) {
    std::string text = kManifest;
    text.replace(text.find("  repeats: 3\n"), 13, "  repeats: 3\n" + keys);
    return text;
  };
  std::string d = s.work->Commit(
      {{"trainq.yaml", defaults("  correction: bh\n  determinism: check\n")}}, "check determinism");
  s.work->Run("push -q origin main");
  REQUIRE(s.Send(false, PushPayload(s.a, d, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor([&] { return s.PushDone(d); }, 20s));
  REQUIRE(testing::WaitFor([&] { return s.AllEnded(d); }, 60s));
  INFO(s.Log());
  // The two checks' runs, not the batches again.
  CHECK(s.RunCount() == runs_before + 2);
  std::map<std::string, const BatchProgress*> by_name;
  auto at_d = s.BatchesAt(d);
  for (const auto& b : at_d) by_name[b.experiment] = &b;
  REQUIRE(by_name.size() == 4);
  for (const char* e : {"a", "b"}) {
    INFO(e);
    REQUIRE(by_name.count(e));
    CHECK(by_name[e]->reuses_batch_id.has_value());
    REQUIRE(by_name.count(std::string(e) + "@repro"));
    CHECK(by_name[std::string(e) + "@repro"]->values.size() == 1);
  }
  CHECK(s.Log().find(d.substr(0, 10) + ": reused a (batch ") != std::string::npos);
  CHECK(s.Log().find("determinism check queued: a, b") != std::string::npos);
  std::string out;
  REQUIRE(testing::RunShell(StdoutOnly(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) +
                                       " show " + d + " --json"),
                            &out) == 0);
  auto view = json::parse(out);
  int checked = 0;
  for (const auto& bj : view["batches"]) {
    if (bj["experiment"] != "a" && bj["experiment"] != "b") continue;
    INFO(bj.dump());
    CHECK(bj.value("determinism", "").starts_with("reproducible"));
    ++checked;
  }
  CHECK(checked == 2);

  // Only the correction changes: nothing runs, and the push says why.
  const std::int64_t runs_after = s.RunCount();
  std::string e = s.work->Commit(
      {{"trainq.yaml", defaults("  correction: none\n  determinism: check\n")}}, "correction");
  s.work->Run("push -q origin main");
  REQUIRE(s.Send(false, PushPayload(d, e, s.origin_url)).status == 202);
  REQUIRE(testing::WaitFor([&] { return s.PushDone(e); }, 20s));
  CHECK(s.RunCount() == runs_after);
  CHECK(s.BatchesAt(e).empty());
  CHECK(s.Log().find(e.substr(0, 10) + ": no watched path or experiment changed") !=
        std::string::npos);
  s.Stop();
}

TEST_CASE(
    "e2e: trainq logs prints a run's output from the database and through --server, and serve logs "
    "each cancel and its shutdown",
    "[server][e2e][logs]") {
  Served s;
  s.Start();
  auto at_a = s.BatchesAt(s.a);
  REQUIRE_FALSE(at_a.empty());
  auto store = Store::Open(s.db).value();
  auto runs = store.runs().Runs(at_a[0].id, std::nullopt, 0).value();
  REQUIRE_FALSE(runs.empty());
  const RunRow& r = runs.front();
  std::string want = "training " + r.experiment + " seed " + std::to_string(r.seed) + "\n";
  REQUIRE(ReadFile(r.log_path).value_or("").find(want) != std::string::npos);

  std::string tq = std::string(TRAINQ_BINARY) + " --db " + ShellQuote(s.db);
  std::string local, remote, out;
  CHECK(testing::RunShell(StdoutOnly(tq + " logs " + std::to_string(r.id)), &local) == 0);
  CHECK(local == ReadFile(r.log_path).value_or("?"));
  CHECK(testing::RunShell(StdoutOnly(std::string(TRAINQ_BINARY) + " logs " +
                                     std::to_string(r.id) + " --server " + s.base_url +
                                     " --token-file " + ShellQuote(s.tmp / "read.token")),
                          &remote) == 0);
  CHECK(remote == local);
  // --follow on an ended run prints it and returns.
  CHECK(testing::RunShell(StdoutOnly(tq + " logs --follow " + std::to_string(r.id)), &out) == 0);
  CHECK(out == local);
  // A rank a plain run does not have, and a run that does not exist.
  CHECK(testing::RunShell(tq + " logs " + std::to_string(r.id) + " --rank 3 2>&1", &out) == 1);
  CHECK(out.find("has no log of rank 3 (it has no rank logs)") != std::string::npos);
  CHECK(testing::RunShell(tq + " logs 999 2>&1", &out) == 1);
  CHECK(out.find("run 999 does not exist") != std::string::npos);

  // A slow run, cancelled: serve's log says so.
  s.work->Run("checkout -q -b slow");
  std::string slow = s.work->Commit({{"run.sh", std::string("sleep 30\n") + kRun}}, "slow");
  REQUIRE(testing::RunShell(
              StdoutOnly(tq + " submit --json -e a -n 1 --repo " + ShellQuote(s.work->dir())),
              &out) == 0);
  std::int64_t batch = json::parse(out)["batches"][0]["id"];
  REQUIRE(testing::RunShell(tq + " cancel " + std::to_string(batch), &out) == 0);
  REQUIRE(testing::WaitFor(
      [&] {
        std::string log = s.Log();
        return log.find("cancelled: a seed 1 (batch " + std::to_string(batch) + ")") !=
               std::string::npos;
      },
      20s));
  s.Stop();
  CHECK(s.Log().find("trainq serve stopped (signal)") != std::string::npos);
  (void)slow;
}

TEST_CASE(
    "trainq submit queues only the experiments whose inputs have no batch yet, and --rerun queues "
    "them anyway",
    "[cli][reuse]") {
  testing::TempDir tmp;
  GitCli work(tmp / "work");
  std::string a = work.Commit({{"trainq.yaml", kManifest},
                               {"run.sh", kRun},
                               {"configs/a.yaml", "lr: 5\n"},
                               {"configs/b.yaml", "lr: 6\n"}},
                              "base");
  const std::string db = testing::StoreLocation(tmp, "t.db");
  std::string tq = std::string(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " submit --repo " +
                   ShellQuote(work.dir());
  std::string out;
  REQUIRE(testing::RunShell(StdoutOnly(tq + " --json"), &out) == 0);
  auto first = json::parse(out);
  REQUIRE(first["batches"].size() == 2);
  CHECK(first["batches"][0]["runs_added"] == 3);
  CHECK(first["batches"][1]["runs_added"] == 3);

  // One experiment changes: only it is queued.
  std::string b = work.Commit({{"configs/a.yaml", "lr: 7\n"}}, "tune a");
  REQUIRE(testing::RunShell(tq + " 2>&1", &out) == 0);
  INFO(out);
  CHECK(out.find("a: 3 runs queued (seeds 1..3)") != std::string::npos);
  std::int64_t b_id = first["batches"][1]["id"];
  CHECK(out.find("b: reused batch " + std::to_string(b_id) + " of " + a.substr(0, 10) +
                 " (same inputs; --rerun runs it again)") != std::string::npos);
  {
    auto store = Store::Open(db).value();
    CHECK(store.runs().Runs(std::nullopt, std::nullopt, 0).value().size() == 9);
    auto at_b = store.runs().BatchesForCommit(b).value();
    REQUIRE(at_b.size() == 2);
  }
  // b's runs at b are a's: not compared with themselves.
  REQUIRE(testing::RunShell(StdoutOnly(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                       " show " + b + " --json"),
                            &out) == 0);
  {
    auto view = json::parse(out);
    bool saw = false;
    for (const auto& bj : view["batches"]) {
      if (bj["experiment"] != "b") continue;
      saw = true;
      CHECK(bj["reuses_batch"] == b_id);
      CHECK_FALSE(bj.contains("vs_parent"));
      CHECK(bj.value("baseline_note", "").starts_with("the same runs as batch " +
                                                      std::to_string(b_id)));
    }
    CHECK(saw);
  }
  // Cancelling the reusing batch cancels nothing of the batch it reuses, and
  // says which batch holds the runs.
  {
    auto store = Store::Open(db).value();
    std::int64_t reusing = 0;
    auto at_b = store.runs().BatchesForCommit(b).value();
    for (const auto& x : at_b) {
      if (x.reuses_batch_id) reusing = x.id;
    }
    REQUIRE(reusing > 0);
    REQUIRE(testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " cancel " +
                                  std::to_string(reusing),
                              &out) == 0);
    CHECK(out.find("nothing to cancel: it has no runs of its own, it reuses batch " +
                   std::to_string(b_id) + "'s (at " + a.substr(0, 10) + ")") != std::string::npos);
    CHECK(store.runs().Batch(b_id).value()->count(RunState::kQueued) == 3);
  }
  // Again: nothing new.
  REQUIRE(testing::RunShell(StdoutOnly(tq + " --json"), &out) == 0);
  auto again = json::parse(out);
  for (const auto& x : again["batches"]) CHECK(x["runs_added"] == 0);

  // --rerun: b runs at this commit after all.
  REQUIRE(testing::RunShell(tq + " -e b --rerun 2>&1", &out) == 0);
  INFO(out);
  CHECK(out.find("b: already submitted; 3 more runs queued") != std::string::npos);
  auto store = Store::Open(db).value();
  CHECK(store.runs().Runs(std::nullopt, std::nullopt, 0).value().size() == 12);
  auto at_b = store.runs().BatchesForCommit(b).value();
  for (const auto& x : at_b) CHECK_FALSE(x.reuses_batch_id);
}

}  // namespace
}  // namespace trainq
