// End to end through the real binaries on the fake Kubernetes API server
// (tests/support/fake_kube.py, HTTPS on loopback, bodies checked against the
// published OpenAPI schema): `trainq serve` with a kubernetes pool creates
// pods whose container is the real `trainq worker` (run by the fake as a
// local process), the workers register and run real runs, and the pods and
// the token's Secret are deleted when idle. Also: GPU requests, an image
// that cannot be pulled (failed boots, `failing`), a pod that cannot be
// scheduled (its FailedScheduling message in `trainq machines` and `trainq
// status`), preemption mid-run, kill -9 of serve, a 403 quota answer, a
// two-pod gang, and kubectl listing trainq's pods on the fake.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/fake_kube.h"
#include "tests/support/git_fixture.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

namespace trainq {
namespace {

using testing::Daemon;
using testing::FakeKube;

// Each run waits for `release` (when given) and reports its seed.
std::string Manifest(int repeats, const std::string& release = "") {
  std::string wait = release.empty() ? ""
                                     : "i=0; while [ ! -e " + release +
                                           " ] && [ $i -lt 1200 ]; do i=$((i+1)); sleep 0.05; done; ";
  return "version: 1\n"
         "defaults: {repeats: " + std::to_string(repeats) + ", timeout: 3m}\n"
         "experiments:\n"
         "  quick:\n"
         "    command: >-\n"
         "      " + wait + "echo \"{\\\"name\\\":\\\"accuracy\\\",\\\"value\\\":0.$TRAINQ_SEED}\" >> \"$TRAINQ_METRICS_FILE\"\n";
}

struct KubeServe {
  testing::TempDir tmp;
  testing::GitFixture repo{tmp / "repo"};
  std::string db = testing::StoreLocation(tmp, "trainq.db");
  std::unique_ptr<FakeKube> kube;
  Daemon daemon;
  // One port for every serve of the test: a restarted serve is found by the
  // workers already running.
  int port = testing::FreeLoopbackPort();

  explicit KubeServe(FakeKube::Options o = {}) {
    auto k = FakeKube::Start(tmp / "kube", o);
    INFO((k ? std::string() : k.error().message));
    REQUIRE(k);
    kube = std::move(*k);
  }
  ~KubeServe() {
    if (daemon.pid > 0) {
      daemon.runner.KillGroup(daemon.pid, SIGKILL);
      daemon.runner.Wait(daemon.pid);
      daemon.pid = 0;
    }
  }

  void Submit(const std::string& manifest, const std::string& script = "",
              const std::string& script_name = "") {
    std::map<std::string, std::string> files = {{"trainq.yaml", manifest}};
    if (!script.empty()) files[script_name] = script;
    repo.Commit(files, "experiment");
    std::string out;
    REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                  " submit --repo " + ShellQuote(repo.dir()),
                              &out) == 0);
  }
  // The pool: `extra` lines are added to the pool, `params` lines to its params.
  void Config(const std::string& extra, const std::string& params = "",
              const std::string& image = "ghcr.io/example/trainq-worker:1.0") {
    REQUIRE(WriteFile(tmp / "server.yaml",
                      "pools:\n"
                      "  - name: gpu\n"
                      "    provider: kubernetes\n"
                      "    allow_loopback: true\n"  // the fake's pods run on this host
                      "    sandbox: none\n"
                      "    idle_grace: 1s\n"
                      "    list_interval: 1s\n" +
                          extra +
                          "    params:\n"
                          "      namespace: ml\n"
                          "      image: " + image + "\n"
                          "      api_server: " + kube->url() + "\n"
                          "      api_token_file: " + kube->token_file() + "\n"
                          "      ca_file: " + kube->ca_file() + "\n"
                          "      stop_grace: 5s\n" +
                          params));
  }
  void Serve(bool until_idle = true) {
    std::vector<std::string> argv = {TRAINQ_BINARY, "--db",        db,       "serve",
                                     "--config",    tmp / "server.yaml",     "--listen",
                                     "127.0.0.1:" + std::to_string(port),        "--poll-ms",   "50",     "--heartbeat",
                                     "1"};
    if (until_idle) argv.push_back("--until-idle");
    auto pid = daemon.runner.Spawn({argv, {}, tmp.path().string(), tmp / "serve.log"});
    REQUIRE(pid);
    daemon.pid = *pid;
  }
  std::optional<ExitStatus> WaitExit(std::chrono::seconds deadline) {
    std::optional<ExitStatus> status;
    bool exited = testing::WaitFor(
        [&] {
          status = daemon.runner.Poll(daemon.pid);
          return status.has_value();
        },
        deadline);
    if (exited) daemon.pid = 0;
    return status;
  }
  std::string Log() { return testing::Slurp(tmp / "serve.log"); }
  std::string Trainq(const std::string& args) {
    std::string out;
    testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args + " 2>&1",
                      &out);
    return out;
  }
  // The pod creations the fake accepted or refused.
  std::vector<json> PodPosts() {
    std::vector<json> out;
    auto r = kube->Requests();
    REQUIRE(r);
    for (const auto& q : *r) {
      if (q["method"] == "POST" && q["path"] == "/api/v1/namespaces/ml/pods") out.push_back(q);
    }
    return out;
  }
  bool NothingLeft() {
    auto pods = kube->Pods();
    auto secrets = kube->Secrets();
    return pods && secrets && pods->empty() && secrets->empty();
  }
};

TEST_CASE("kubernetes e2e: pods boot trainq workers that run the queue, then pods and Secret go",
          "[fleet][kubernetes][e2e]") {
  KubeServe k({.token = "fake-api-token-0123", .node_gpus = 2});
  k.Submit(Manifest(4));
  k.Config("    gpus: 1\n    max: 2\n    slots: 1\n");
  k.Serve();
  auto status = k.WaitExit(120s);
  INFO("serve log:\n" << k.Log() << "\nfake:\n" << k.kube->Log());
  REQUIRE(status);
  CHECK(status->ok());

  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 4);
  for (const auto& r : *runs) CHECK(r.state == RunState::kSucceeded);
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  REQUIRE(!machines->empty());
  std::set<std::string> names;
  for (const auto& m : *machines) {
    INFO("machine " << m.name << " " << m.state << " " << m.last_error);
    CHECK(m.provider == "kubernetes");
    CHECK(m.state == "stopped");
    CHECK(m.ready_ms.has_value());  // its worker registered from inside the pod
    CHECK(m.provider_id == m.name);  // the pod is named after the machine
    names.insert(m.name);
  }
  // Every pod asked for the pool's GPU (requests = limits) and carried no token.
  auto posts = k.PodPosts();
  REQUIRE(posts.size() == machines->size());
  for (const auto& p : posts) {
    const json& c = p["body"]["spec"]["containers"][0];
    CHECK(c["resources"]["limits"]["nvidia.com/gpu"] == "1");
    CHECK(c["resources"]["requests"]["nvidia.com/gpu"] == "1");
    CHECK(c["command"].size() == 1);
    CHECK(c["args"][0] == "worker");
    CHECK(names.count(p["body"]["metadata"]["name"].get<std::string>()) == 1);
  }
  std::string token = testing::Slurp(k.tmp / "trainq-data/tokens/gpu.token");
  token = std::string(Trim(token));
  REQUIRE(!token.empty());
  auto requests = k.kube->Requests();
  REQUIRE(requests);
  for (const auto& r : *requests) {
    if (r["path"].get<std::string>().find("/secrets") != std::string::npos) continue;
    CHECK(r.dump().find(token) == std::string::npos);
  }
  CHECK(k.Log().find(token) == std::string::npos);
  // Nothing left in the cluster: the pods went when idle, the Secret with the last.
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 20s));
}

TEST_CASE("kubernetes e2e: an image that cannot be pulled fails boots at once, then the pool is "
          "failing",
          "[fleet][kubernetes][e2e]") {
  KubeServe k;
  k.Submit(Manifest(1));
  k.Config("    failing_after: 2\n    boot_backoff: 1s\n    boot_timeout: 10m\n", "",
           "registry.invalid/trainq-worker:missing");
  const auto start = std::chrono::steady_clock::now();
  k.Serve(false);
  INFO("serve log:\n" << k.Log());
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  // The first failed boot: seconds, not boot_timeout (10 minutes).
  REQUIRE(testing::WaitFor(
      [&] {
        auto ms = store->machines().List(true);
        return ms && !ms->empty() && ms->front().state == "failed";
      },
      30s));
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  CHECK(machines->front().last_error.find("boot: its container cannot start: ") == 0);
  CHECK((machines->front().last_error.find("ErrImagePull") != std::string::npos ||
         machines->front().last_error.find("ImagePullBackOff") != std::string::npos));
  // failing_after 2: the second failed boot makes the pool failing.
  REQUIRE(testing::WaitFor(
      [&] {
        auto states = store->machines().PoolStates();
        return states && !states->empty() && states->front().failing;
      },
      30s));
  CHECK(std::chrono::steady_clock::now() - start < 40s);
  std::string st = k.Trainq("status");
  INFO("trainq status:\n" << st);
  CHECK(st.find("FAILING: 2 boots in a row failed") != std::string::npos);
  CHECK(st.find("its container cannot start") != std::string::npos);
  std::string mach = k.Trainq("machines --all");
  INFO("trainq machines --all:\n" << mach);
  CHECK(mach.find("failed (boot: its container cannot start: ") != std::string::npos);
  // The failed pods were deleted; no more are created while failing.
  CHECK(testing::WaitFor([&] { return k.kube->Pods() && k.kube->Pods()->empty(); }, 20s));
  CHECK(k.PodPosts().size() == 2);
}

TEST_CASE("kubernetes e2e: an unschedulable pod shows FailedScheduling, then runs once a GPU "
          "frees",
          "[fleet][kubernetes][e2e]") {
  KubeServe k;  // a node without GPUs
  k.Submit(Manifest(1));
  k.Config("    gpus: 1\n    max: 1\n");
  k.Serve();
  INFO("serve log:\n" << k.Log());
  std::string out;
  REQUIRE(testing::WaitFor(
      [&] {
        out = k.Trainq("machines");
        return out.find("Insufficient nvidia.com/gpu") != std::string::npos;
      },
      30s));
  INFO("trainq machines:\n" << out);
  CHECK(out.find("booting (waiting for a node (FailedScheduling): 0/1 nodes are available: 1 "
                 "Insufficient nvidia.com/gpu.") != std::string::npos);
  std::string st = k.Trainq("status");
  INFO("trainq status:\n" << st);
  CHECK(st.find("booting for") != std::string::npos);
  CHECK(st.find("FailedScheduling): 0/1 nodes are available") != std::string::npos);
  CHECK(k.Log().find("not up yet: waiting for a node (FailedScheduling)") != std::string::npos);

  // kubectl (a real client) lists trainq's pod on the fake, by trainq's labels.
  std::string kubectl;
  int rc = testing::RunShell("kubectl --server " + k.kube->url() + " --token " + k.kube->token() +
                                 " --certificate-authority " + k.kube->ca_file() +
                                 " -n ml get pods -l trainq.dev/pool=gpu 2>&1",
                             &kubectl);
  INFO("kubectl:\n" << kubectl);
  CHECK(rc == 0);
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  auto machines = store->machines().List(false);
  REQUIRE(machines);
  REQUIRE(machines->size() == 1);
  CHECK(kubectl.find(machines->front().name) != std::string::npos);
  CHECK(kubectl.find("Pending") != std::string::npos);

  // A GPU frees up: the pod is scheduled, its worker runs the run.
  REQUIRE(k.kube->Control("node", {{"nvidia.com/gpu", "1"}}));
  auto status = k.WaitExit(90s);
  REQUIRE(status);
  CHECK(status->ok());
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  CHECK(runs->front().state == RunState::kSucceeded);
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 20s));
}

TEST_CASE("kubernetes e2e: a pod preempted mid-run (DisruptionTarget) requeues its run, attempt "
          "unchanged",
          "[fleet][kubernetes][e2e]") {
  KubeServe k;
  k.Submit(Manifest(1, k.tmp / "release"));
  k.Config("    max: 1\n");
  k.Serve();
  INFO("serve log:\n" << k.Log());
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  std::string victim;
  REQUIRE(testing::WaitFor(
      [&] {
        auto running = store->runs().Runs(std::nullopt, RunState::kRunning, 0);
        if (!running || running->empty()) return false;
        victim = running->front().worker;
        return true;
      },
      60s));
  REQUIRE(k.kube->Control("disrupt/ml/" + victim));
  // The machine is lost (the cluster took it), and the run goes back to the queue.
  REQUIRE(testing::WaitFor(
      [&] {
        auto m = store->machines().MachineByName(victim);
        return m && *m && (*m)->state == "failed";
      },
      30s));
  REQUIRE(WriteFile(k.tmp / "release", ""));
  auto status = k.WaitExit(90s);
  REQUIRE(status);
  CHECK(status->ok());
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  const auto& run = runs->front();
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 1);  // the preemption used no attempt
  CHECK(run.worker != victim);
  auto m = store->machines().MachineByName(victim);
  REQUIRE(m);
  REQUIRE(*m);
  CHECK((*m)->lost());
  CHECK((*m)->last_error.find("DisruptionTarget: PreemptionByScheduler") != std::string::npos);
  // The pool is not failing: a preemption is no failed boot.
  auto states = store->machines().PoolStates();
  REQUIRE(states);
  for (const auto& s : *states) CHECK(s.failed_boots == 0);
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 20s));
}

TEST_CASE("kubernetes e2e: kill -9 of serve, restart: every pod adopted or stopped",
          "[fleet][kubernetes][e2e]") {
  KubeServe k;
  k.Submit(Manifest(2, k.tmp / "release"));
  k.Config("    max: 2\n    boot_timeout: 30s\n");
  k.Serve();
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  REQUIRE(testing::WaitFor(
      [&] {
        auto running = store->runs().Runs(std::nullopt, RunState::kRunning, 0);
        return running && running->size() == 2;
      },
      60s));
  k.daemon.runner.KillGroup(k.daemon.pid, SIGKILL);
  k.daemon.runner.Wait(k.daemon.pid);
  k.daemon.pid = 0;
  // A pod trainq created but never recorded (a crash between the API's
  // answer and the store): this pool's labels, unknown to the store.
  auto instance = std::string(Trim(testing::Slurp(k.tmp / "trainq-data/instance-id")));
  REQUIRE(!instance.empty());
  {
    json orphan = {{"apiVersion", "v1"},
                   {"kind", "Pod"},
                   {"metadata",
                    {{"name", "tq-" + instance + "-gpu-orphan"},
                     {"labels",
                      {{"trainq.dev/instance", instance},
                       {"trainq.dev/pool", "gpu"},
                       {"trainq.dev/machine", "tq-" + instance + "-gpu-orphan"}}}}},
                   {"spec",
                    {{"restartPolicy", "Never"},
                     {"containers", json::array({{{"name", "worker"},
                                                  {"image", "x"},
                                                  {"command", json::array({"sleep", "600"})}}})}}}};
    CurlHttpClient http;
    HttpRequest req;
    req.method = "POST";
    req.url = k.kube->url() + "/api/v1/namespaces/ml/pods";
    req.headers = {{"Authorization", "Bearer " + k.kube->token()},
                   {"Content-Type", "application/json"}};
    req.body = orphan.dump();
    req.ca_file = k.kube->ca_file();
    auto r = http.Send(req);
    REQUIRE(r);
    REQUIRE(r->status == 201);
  }
  k.Serve();
  INFO("serve log:\n" << k.Log());
  REQUIRE(WriteFile(k.tmp / "release", ""));
  auto status = k.WaitExit(120s);
  REQUIRE(status);
  CHECK(status->ok());
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 2);
  for (const auto& r : *runs) CHECK(r.state == RunState::kSucceeded);
  CHECK(k.Log().find("gpu-orphan") != std::string::npos);
  // Every pod, the orphan included, was deleted; so was the Secret.
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 30s));
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  for (const auto& m : *machines) {
    INFO("machine " << m.name << " " << m.state << " " << m.last_error);
    CHECK((m.state == "stopped" || m.state == "failed"));
  }
}

TEST_CASE("kubernetes e2e: a 403 exceeded-quota answer backs the pool off and the runs still finish",
          "[fleet][kubernetes][e2e]") {
  KubeServe k;
  REQUIRE(k.kube->Control("quota", {{"pods", 1}}));
  k.Submit(Manifest(3, k.tmp / "release"));
  k.Config("    max: 3\n    boot_backoff: 5s\n");
  k.Serve();
  INFO("serve log:\n" << k.Log());
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  REQUIRE(testing::WaitFor([&] { return k.Log().find("exceeded quota") != std::string::npos; },
                           60s));
  // A refused creation is a failed boot (issue 38.10), as on every provider:
  // the pool's boot back-off (5 s here, then 10 s) spaces the next tries.
  REQUIRE(testing::WaitFor(
      [&] {
        const std::string log = k.Log();
        const auto at = log.find("failed: ");
        return at != std::string::npos && log.find("boot of ") != std::string::npos &&
               log.find("exceeded quota", at) != std::string::npos;
      },
      10s));
  // Backed off: the creations are tried again 5 s, then 10 s later (the
  // pool's boot back-off), not at every pass (a pass a second). The boots of
  // one pass go out together, from the fleet's boot threads: each pass's
  // POSTs come within half a second.
  std::vector<json> posts;
  std::vector<double> passes;  // when each pass's POSTs began
  REQUIRE(testing::WaitFor(
      [&] {
        posts = k.PodPosts();
        passes.clear();
        double last = -1e9;
        for (const auto& p : posts) {
          const double at = p["at"].get<double>();
          if (at - last >= 0.5) passes.push_back(at);
          last = at;
        }
        return passes.size() >= 2;
      },
      30s));
  CHECK(posts.size() >= 3);  // the first pass tried all 3; the quota let 1 through
  CHECK(passes[1] - passes[0] >= 4.5);
  REQUIRE(WriteFile(k.tmp / "release", ""));
  auto status = k.WaitExit(120s);
  REQUIRE(status);
  CHECK(status->ok());
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  for (const auto& r : *runs) CHECK(r.state == RunState::kSucceeded);
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 20s));
}

constexpr const char* kGangScript = R"PY(import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank", rank, "MASTER_ADDR", addr, "MASTER_PORT", port, flush=True)
if rank == 0:
    srv = socket.create_server(("", port))
    srv.settimeout(60)
    heard = []
    while len(heard) < world - 1:
        c, _ = srv.accept()
        heard.append(int(c.makefile().readline()))
        c.sendall(b"ok\n")
        c.close()
    with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
        f.write('{"name": "accuracy", "value": %s}\n' % ((world + sum(heard)) / 100.0))
else:
    deadline = time.time() + 60
    while True:
        try:
            s = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    s.sendall(b"%d\n" % rank)
    assert s.makefile().readline().strip() == "ok"
)PY";

TEST_CASE("kubernetes e2e: a two-pod gang rendezvouses at the rank-0 pod's address",
          "[fleet][kubernetes][e2e][gang]") {
  KubeServe k;
  k.Submit("version: 1\n"
           "defaults: {repeats: 1, timeout: 3m}\n"
           "experiments:\n"
           "  ddp:\n"
           "    command: python3 ddp.py\n"
           "    resources: {nodes: 2, processes_per_node: 1}\n",
           kGangScript, "ddp.py");
  k.Config("    max: 2\n");
  k.Serve();
  auto status = k.WaitExit(120s);
  INFO("serve log:\n" << k.Log());
  REQUIRE(status);
  CHECK(status->ok());
  auto store = Store::Open(k.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  CHECK(runs->front().state == RunState::kSucceeded);
  REQUIRE(runs->front().metric_value);
  CHECK(*runs->front().metric_value == Approx(0.03));  // world 2 + rank 1
  // Two pods; rank 0's address is its pod's IP (status.podIP), which the
  // other pod connected to.
  auto posts = k.PodPosts();
  CHECK(posts.size() == 2);
  std::string log = testing::Slurp(k.tmp / ("trainq-data/runs/" +
                                            std::to_string(runs->front().id) + "/output.log"));
  INFO("run output:\n" << log);
  CHECK(log.find("MASTER_ADDR 127.0.0.1") != std::string::npos);
  CHECK(testing::WaitFor([&] { return k.NothingLeft(); }, 20s));
}

}  // namespace
}  // namespace trainq
