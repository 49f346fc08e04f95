// The kubernetes provider against the fake API server (tests/support/
// fake_kube.py) over HTTPS on loopback: the pods and Secrets it sends are
// checked there against Kubernetes' published OpenAPI schema, and the pods'
// containers run as local processes.
#include "cloud/kubernetes_provider.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>

#include "cloud/ec2_provider.h"  // Base64Encode
#include "cloud/provider.h"
#include "core/strings.h"
#include "tests/support/fake_kube.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq::cloud {
namespace {

using testing::FakeKube;

std::map<std::string, std::string> Params(const FakeKube& k,
                                          std::map<std::string, std::string> more = {}) {
  std::map<std::string, std::string> p = {{"image", "ghcr.io/example/trainq-worker:1"},
                                          {"namespace", "ml"},
                                          {"api_server", k.url()},
                                          {"api_token_file", k.token_file()},
                                          {"ca_file", k.ca_file()},
                                          {"stop_grace", "2s"}};
  for (auto& [key, v] : more) p[key] = v;
  return p;
}

BootSpec Spec(const std::string& name, int gpus = 0) {
  BootSpec b;
  b.tag = {"gpu", "abcd1234"};
  b.name = name;
  b.gpus = gpus;
  b.token = "pool-token-s3cret";
  // A stand-in for `trainq worker`: prints the token file it was given.
  b.worker_argv = {"sh", "-c", "echo started; echo token=$(cat \"$2\"); sleep 60", "sh",
                   "--token-file", "/home/serve/data/tokens/gpu.token"};
  return b;
}

struct Fixture {
  testing::TempDir tmp;
  std::unique_ptr<FakeKube> kube;
  CurlHttpClient http;
  std::unique_ptr<Provider> provider;

  explicit Fixture(FakeKube::Options o = {}, std::map<std::string, std::string> more = {}) {
    auto k = FakeKube::Start(tmp / "kube", o);
    INFO((k ? std::string() : k.error().message));
    REQUIRE(k);
    kube = std::move(*k);
    auto p = MakeProvider("kubernetes", Params(*kube, more), {nullptr, &http, nullptr, ""});
    INFO((p ? std::string() : p.error().message));
    REQUIRE(p);
    provider = std::move(*p);
  }

  std::optional<ListedMachine> Listed(const std::string& id) {
    auto l = provider->List({"gpu", "abcd1234"});
    REQUIRE(l);
    for (const auto& m : *l) {
      if (m.id == id) return m;
    }
    return std::nullopt;
  }
};

TEST_CASE("kubernetes params: unknown keys, required image, credentials, quantities, tolerations",
          "[kubernetes]") {
  auto err = [](std::map<std::string, std::string> p) {
    auto st = CheckProviderParams("kubernetes", p);
    return st ? std::string() : st.error().message;
  };
  CHECK(err({{"image", "x"}}).empty());
  CHECK(err({}) == "params.image: required by kubernetes");
  CHECK(err({{"image", "x"}, {"nodeSelector", "a=b"}}).starts_with("params.nodeSelector: unknown"));
  CHECK(err({{"image", "x"}, {"api_token_file", "/t"}}) ==
        "params.api_token_file: only with api_server (a kubeconfig names its own)");
  CHECK(err({{"image", "x"}, {"kubeconfig", "/k"}, {"api_server", "https://h"}}).find("not both") !=
        std::string::npos);
  CHECK(err({{"image", "x"}, {"cpu", "4 cores"}}) ==
        "params.cpu: expected a quantity (4, 500m, 16Gi), got \"4 cores\"");
  CHECK(err({{"image", "x"}, {"cpu", "500m"}, {"memory", "16Gi"}}).empty());
  CHECK(err({{"image", "x"}, {"namespace", "ML_team"}}).find("not a namespace name") !=
        std::string::npos);
  CHECK(err({{"image", "x"}, {"tolerations", R"([{"key":"nvidia.com/gpu","operator":"Exists"}])"}})
            .empty());
  CHECK(err({{"image", "x"}, {"tolerations", R"([{"key":"a","effekt":"NoSchedule"}])"}}) ==
        "params.tolerations[0].effekt: unknown key (expected one of: effect, key, operator, "
        "tolerationSeconds, value)");
  CHECK(err({{"image", "x"}, {"labels", R"({"trainq.dev/pool":"x"})"}}).find("trainq's own") !=
        std::string::npos);
  CHECK(err({{"image", "x"}, {"node_selector", "gpu"}}).find("expected a mapping") !=
        std::string::npos);
}

TEST_CASE("kubernetes params for the sandbox: host_users, proc_mount, fs_group", "[kubernetes]") {
  auto err = [](std::map<std::string, std::string> p) {
    p["image"] = "x";
    auto st = CheckProviderParams("kubernetes", p);
    return st ? std::string() : st.error().message;
  };
  CHECK(err({{"host_users", "false"}, {"proc_mount", "Unmasked"}}).empty());
  CHECK(err({{"host_users", "true"}}).empty());
  CHECK(err({{"host_users", "no"}}) ==
        "params.host_users: expected true or false (false: the pod gets its own user namespace)");
  CHECK(err({{"proc_mount", "Unmasked"}}) ==
        "params.proc_mount: Unmasked needs host_users: false (Kubernetes gives an unmasked /proc "
        "only to a pod in its own user namespace)");
  CHECK(err({{"host_users", "true"}, {"proc_mount", "Unmasked"}}).starts_with(
      "params.proc_mount: Unmasked needs host_users: false"));
  CHECK(err({{"proc_mount", "unmasked"}}) == "params.proc_mount: expected Default or Unmasked");
  CHECK(err({{"proc_mount", "Default"}}).empty());
  CHECK(err({{"fs_group", "1001"}}).empty());
  CHECK(err({{"fs_group", "none"}}).empty());
  CHECK(err({{"fs_group", "-1"}}) == "params.fs_group: expected a group id, or none, got \"-1\"");
  CHECK(err({{"fs_group", "70000"}}).empty());
  CHECK(err({{"fs_group", "70000"}, {"host_users", "false"}}) ==
        "params.fs_group: expected a group id from 0 to 65535 (host_users: false), or none, got "
        "\"70000\"");
}

TEST_CASE("kubernetes pod for the sandbox: hostUsers, procMount and fsGroup pass the 1.35 schema",
          "[kubernetes]") {
  {
    // The defaults: the cluster's user namespace and /proc, and an fsGroup
    // so that a non-root worker reads its token (mode 0400, root's).
    Fixture f;
    REQUIRE(f.provider->Boot(Spec("tq-abcd1234-gpu-d1")));
    auto pods = f.kube->Pods();
    REQUIRE(pods);
    REQUIRE(pods->size() == 1);
    const json& spec = (*pods)[0]["spec"];
    CHECK(spec["securityContext"] == json({{"fsGroup", 2000}}));
    CHECK(!spec.contains("hostUsers"));
    CHECK(!spec["containers"][0].contains("securityContext"));
    CHECK(spec["volumes"][0]["secret"]["defaultMode"] == 0400);
  }
  {
    Fixture f({}, {{"host_users", "false"}, {"proc_mount", "Unmasked"}, {"fs_group", "1001"}});
    auto id = f.provider->Boot(Spec("tq-abcd1234-gpu-u1"));
    INFO("fake log:\n" << f.kube->Log());
    INFO((id ? std::string() : id.error().message));
    REQUIRE(id);  // the fake checks the body against the v1.35 schema
    auto pods = f.kube->Pods();
    REQUIRE(pods);
    REQUIRE(pods->size() == 1);
    const json& spec = (*pods)[0]["spec"];
    CHECK(spec["hostUsers"] == false);
    CHECK(spec["securityContext"] == json({{"fsGroup", 1001}}));
    CHECK(spec["containers"][0]["securityContext"] == json({{"procMount", "Unmasked"}}));
  }
  {
    Fixture f({}, {{"fs_group", "none"}});
    REQUIRE(f.provider->Boot(Spec("tq-abcd1234-gpu-n1")));
    auto pods = f.kube->Pods();
    REQUIRE(pods);
    CHECK(!(*pods)[0]["spec"].contains("securityContext"));
  }
}

TEST_CASE("kubernetes params: an http:// api_server is refused unless allow_insecure is true",
          "[kubernetes]") {
  auto err = [](std::map<std::string, std::string> p) {
    auto st = CheckProviderParams("kubernetes", p);
    return st ? std::string() : st.error().message;
  };
  CHECK(err({{"image", "x"}, {"api_server", "http://k8s.example:8080"}})
            .starts_with("params.api_server: http://k8s.example:8080 is plain HTTP: the API token "
                         "would travel in clear"));
  CHECK(err({{"image", "x"}, {"api_server", "http://k8s.example:8080"}, {"allow_insecure", "false"}})
            .starts_with("params.api_server:"));
  CHECK(err({{"image", "x"}, {"api_server", "http://k8s.example:8080"}, {"allow_insecure", "true"}})
            .empty());
  CHECK(err({{"image", "x"}, {"api_server", "https://k8s.example"}}).empty());
  CHECK(err({{"image", "x"}, {"allow_insecure", "1"}}) ==
        "params.allow_insecure: expected true or false, got \"1\"");
}

TEST_CASE("kubeconfig: a plain-HTTP cluster server is refused by line unless allow_insecure",
          "[kubernetes]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "config",
                    "apiVersion: v1\n"
                    "current-context: a\n"
                    "clusters:\n"
                    "- name: c\n"
                    "  cluster: {server: 'http://k8s.example:8080'}\n"
                    "contexts:\n"
                    "- {name: a, context: {cluster: c, user: u}}\n"
                    "users:\n"
                    "- {name: u, user: {token: t}}\n"));
  auto refused = ReadKubeconfig(tmp / "config", "");
  REQUIRE(!refused);
  CHECK(refused.error().message.starts_with(tmp / "config" + ":5: clusters.c.cluster.server: "
                                                              "http://k8s.example:8080 is plain HTTP"));
  auto allowed = ReadKubeconfig(tmp / "config", "", /*allow_insecure=*/true);
  REQUIRE(allowed);
  CHECK(allowed->server == "http://k8s.example:8080");
  auto via_params = ResolveKubeEndpoint({{"kubeconfig", tmp / "config"}});
  REQUIRE(!via_params);
  CHECK(via_params.error().message.find("allow_insecure") != std::string::npos);
  CHECK(ResolveKubeEndpoint({{"kubeconfig", tmp / "config"}, {"allow_insecure", "true"}}));
}

TEST_CASE("kubeconfig: the context's server, CA, tokenFile and namespace, and plugins refused by line",
          "[kubernetes]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "ca.crt", "-----BEGIN CERTIFICATE-----\n"));
  REQUIRE(WriteFile(tmp / "token", "t0k\n"));
  REQUIRE(WriteFile(tmp / "config",
                    "apiVersion: v1\n"
                    "kind: Config\n"
                    "current-context: a\n"
                    "clusters:\n"
                    "- name: c\n"
                    "  cluster: {server: 'https://k8s.example:6443/', certificate-authority: ca.crt}\n"
                    "contexts:\n"
                    "- {name: a, context: {cluster: c, user: u, namespace: team}}\n"
                    "- {name: b, context: {cluster: c, user: gke}}\n"
                    "users:\n"
                    "- name: u\n"
                    "  user: {tokenFile: token}\n"
                    "- name: gke\n"
                    "  user:\n"
                    "    exec: {command: gke-gcloud-auth-plugin}\n"));
  auto e = ReadKubeconfig(tmp / "config", "");
  INFO((e ? std::string() : e.error().message));
  REQUIRE(e);
  CHECK(e->server == "https://k8s.example:6443");
  CHECK(e->ca_file == tmp / "ca.crt");
  CHECK(e->token_file == tmp / "token");
  CHECK(e->namespace_ == "team");
  auto b = ReadKubeconfig(tmp / "config", "b");
  REQUIRE(!b);
  CHECK(b.error().message.starts_with(tmp / "config" + ":15: users.gke.user.exec: credential "
                                                        "plugins are not supported"));
  auto missing = ReadKubeconfig(tmp / "config", "nope");
  REQUIRE(!missing);
  CHECK(missing.error().message.find("contexts: no entry named \"nope\"") != std::string::npos);
}

TEST_CASE("kubernetes Boot: a schema-valid pod and Secret, the token only in the Secret",
          "[kubernetes]") {
  Fixture f({.token = "fake-api-token-0123", .node_gpus = 2},
            {{"cpu", "2"},
             {"memory", "8Gi"},
             {"node_selector", R"({"nvidia.com/gpu.product":"A100"})"},
             {"tolerations", R"([{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}])"},
             {"labels", "team=vision"},
             {"priority_class", "batch-low"},
             {"image_pull_secrets", "regcred"}});
  auto id = f.provider->Boot(Spec("tq-abcd1234-gpu-x1", 1));
  INFO("fake log:\n" << f.kube->Log());
  INFO((id ? std::string() : id.error().message));
  REQUIRE(id);
  CHECK(*id == "tq-abcd1234-gpu-x1");

  auto pods = f.kube->Pods();
  REQUIRE(pods);
  REQUIRE(pods->size() == 1);
  const json& pod = (*pods)[0];
  CHECK(pod["metadata"]["namespace"] == "ml");
  CHECK(pod["metadata"]["labels"]["trainq.dev/instance"] == "abcd1234");
  CHECK(pod["metadata"]["labels"]["trainq.dev/pool"] == "gpu");
  CHECK(pod["metadata"]["labels"]["trainq.dev/machine"] == "tq-abcd1234-gpu-x1");
  CHECK(pod["metadata"]["labels"]["team"] == "vision");
  CHECK(pod["spec"]["restartPolicy"] == "Never");
  CHECK(pod["spec"]["terminationGracePeriodSeconds"] == 2);
  CHECK(pod["spec"]["automountServiceAccountToken"] == false);
  CHECK(pod["spec"]["priorityClassName"] == "batch-low");
  CHECK(pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "A100");
  CHECK(pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu");
  CHECK(pod["spec"]["imagePullSecrets"][0]["name"] == "regcred");
  const json& c = pod["spec"]["containers"][0];
  CHECK(c["image"] == "ghcr.io/example/trainq-worker:1");
  CHECK(c["command"] == json::array({"sh"}));
  CHECK(c["args"].back() == "/var/run/secrets/trainq/token");  // --token-file rewritten
  json want = {{"cpu", "2"}, {"memory", "8Gi"}, {"nvidia.com/gpu", "1"}};
  CHECK(c["resources"]["requests"] == want);
  CHECK(c["resources"]["limits"] == want);
  // The token: in the Secret, nowhere in the pod.
  CHECK(pod.dump().find("pool-token-s3cret") == std::string::npos);
  auto secrets = f.kube->Secrets();
  REQUIRE(secrets);
  REQUIRE(secrets->size() == 1);
  CHECK((*secrets)[0]["data"]["token"] == Base64Encode("pool-token-s3cret"));
  CHECK((*secrets)[0]["metadata"]["name"] ==
        pod["spec"]["volumes"][0]["secret"]["secretName"]);

  // The container runs and reads the token from the mounted Secret.
  std::string log;
  REQUIRE(testing::WaitFor(
      [&] {
        auto t = f.provider->LogTail(*id, "", 2000);
        log = t ? *t : "";
        return log.find("token=pool-token-s3cret") != std::string::npos;
      },
      10s));

  // A retried Boot (its answer was lost): 409 AlreadyExists adopts the pod.
  auto again = f.provider->Boot(Spec("tq-abcd1234-gpu-x1", 1));
  REQUIRE(again);
  CHECK(*again == *id);
  auto listed = f.provider->List({"gpu", "abcd1234"});
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().name == "tq-abcd1234-gpu-x1");
  CHECK(listed->front().ended.empty());
  CHECK(listed->front().note.empty());
  CHECK(f.provider->List({"gpu", "other"})->empty());
  CHECK(f.provider->List({"cpu", "abcd1234"})->empty());

  // Stop: deleted with the pool's grace; the Secret goes with the last pod.
  REQUIRE(f.provider->Stop(*id));
  auto requests = f.kube->Requests();
  REQUIRE(requests);
  bool deleted_with_grace = false;
  for (const auto& r : *requests) {
    CHECK(r["authorized"] == true);
    if (r["method"] == "DELETE" && r["path"] == "/api/v1/namespaces/ml/pods/" + *id) {
      deleted_with_grace = r["body"]["gracePeriodSeconds"] == 2;
    }
  }
  CHECK(deleted_with_grace);
  CHECK(f.kube->Secrets()->empty());
  CHECK(testing::WaitFor([&] { return f.kube->Pods()->empty(); }, 10s));
  CHECK(f.provider->Stop(*id));  // gone: 404 counts as stopped
  CHECK(f.provider->List({"gpu", "abcd1234"})->empty());
}

TEST_CASE("kubernetes List: Unschedulable shows FailedScheduling, image pull errors end at once",
          "[kubernetes]") {
  Fixture f;  // a node without GPUs
  auto gpu = f.provider->Boot(Spec("tq-abcd1234-gpu-a", 1));
  REQUIRE(gpu);
  std::optional<ListedMachine> m;
  REQUIRE(testing::WaitFor(
      [&] {
        m = f.Listed(*gpu);
        return m && !m->note.empty();
      },
      10s));
  CHECK(m->ended.empty());
  CHECK(m->note ==
        "waiting for a node (FailedScheduling): 0/1 nodes are available: 1 Insufficient "
        "nvidia.com/gpu. preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod.");

  Fixture g({}, {{"image", "registry.invalid/trainq:nope"}});
  auto bad = g.provider->Boot(Spec("tq-abcd1234-gpu-b"));
  REQUIRE(bad);
  REQUIRE(testing::WaitFor(
      [&] {
        m = g.Listed(*bad);
        return m && !m->ended.empty();
      },
      10s));
  CHECK(!m->disrupted);
  CHECK((m->ended.starts_with("its container cannot start: ErrImagePull: Failed to pull image "
                              "\"registry.invalid/trainq:nope\"") ||
         m->ended.starts_with("its container cannot start: ImagePullBackOff")));
}

TEST_CASE("kubernetes List: preemption (DisruptionTarget), eviction, deletion by others, exit",
          "[kubernetes]") {
  Fixture f;
  std::vector<std::string> ids;
  for (const char* n : {"tq-x-gpu-1", "tq-x-gpu-2", "tq-x-gpu-3"}) {
    auto id = f.provider->Boot(Spec(n));
    REQUIRE(id);
    ids.push_back(*id);
  }
  REQUIRE(testing::WaitFor([&] { return f.provider->LogTail(ids[2], "", 100).has_value(); }, 10s));
  REQUIRE(f.kube->Control("disrupt/ml/" + ids[0]));
  REQUIRE(f.kube->Control("evict/ml/" + ids[1]));
  auto m = f.Listed(ids[0]);
  REQUIRE(m);
  CHECK(m->disrupted);
  CHECK(m->ended.starts_with("disrupted by the cluster (DisruptionTarget: PreemptionByScheduler"));
  m = f.Listed(ids[1]);
  REQUIRE(m);
  CHECK(m->disrupted);
  CHECK(m->ended == "evicted: The node was low on resource: memory.");
  // Someone else deletes the third (kubectl delete): lost, not a failure.
  FakeKube& k = *f.kube;
  {
    CurlHttpClient http;
    HttpRequest req;
    req.method = "DELETE";
    req.url = k.url() + "/api/v1/namespaces/ml/pods/" + ids[2];
    req.headers = {{"Authorization", "Bearer " + k.token()}};
    req.ca_file = k.ca_file();
    auto r = http.Send(req);
    REQUIRE(r);
    REQUIRE(r->status == 200);
  }
  m = f.Listed(ids[2]);
  if (m) {  // or already gone: the worker stand-in exits on SIGTERM at once
    CHECK(m->disrupted);
    CHECK(m->ended == "its pod was deleted by someone else");
  }
}

TEST_CASE("kubernetes API errors: quota is capacity, RBAC names verb and resource, 401",
          "[kubernetes]") {
  Fixture f;
  REQUIRE(f.kube->Control("quota", {{"pods", 1}}));
  REQUIRE(f.provider->Boot(Spec("tq-x-gpu-q1")));
  auto over = f.provider->Boot(Spec("tq-x-gpu-q2"));
  REQUIRE(!over);
  CHECK(over.error().kind == ErrorKind::kUnavailable);
  CHECK(over.error().message.find("create pods in namespace ml: HTTP 403 Forbidden: pods "
                                  "\"tq-x-gpu-q2\" is forbidden: exceeded quota") !=
        std::string::npos);

  REQUIRE(f.kube->Control("forbid", {{"verb", "list"}, {"resource", "pods"}}));
  auto list = f.provider->List({"gpu", "abcd1234"});
  REQUIRE(!list);
  CHECK(list.error().kind == ErrorKind::kInvalidArgument);
  CHECK(list.error().message.starts_with(
      "kubernetes: forbidden: list pods in namespace ml (the account of params.api_server " +
      f.kube->url() + " needs a Role granting \"list\" on \"pods\""));

  REQUIRE(WriteFile(f.kube->token_file(), "wrong-token\n"));  // re-read at each call
  auto refused = f.provider->Boot(Spec("tq-x-gpu-q3"));
  REQUIRE(!refused);
  CHECK(refused.error().message.find("HTTP 401") != std::string::npos);
  CHECK(refused.error().message.find("refused the credentials") != std::string::npos);
  CHECK(refused.error().message.find("wrong-token") == std::string::npos);
}

TEST_CASE("kubernetes: a kubeconfig reaches the fake (CA file, tokenFile, context namespace)",
          "[kubernetes]") {
  testing::TempDir tmp;
  auto k = FakeKube::Start(tmp / "kube");
  REQUIRE(k);
  CurlHttpClient http;
  auto p = MakeProvider("kubernetes",
                        {{"image", "x"}, {"kubeconfig", (*k)->Kubeconfig("team-a")}},
                        {nullptr, &http, nullptr, ""});
  INFO((p ? std::string() : p.error().message));
  REQUIRE(p);
  auto id = (*p)->Boot(Spec("tq-abcd1234-gpu-k"));
  INFO((id ? std::string() : id.error().message));
  REQUIRE(id);
  auto pods = (*k)->Pods();
  REQUIRE(pods);
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0]["metadata"]["namespace"] == "team-a");
  REQUIRE((*p)->Stop(*id));
}

}  // namespace
}  // namespace trainq::cloud
