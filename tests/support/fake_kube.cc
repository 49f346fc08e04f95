#include "tests/support/fake_kube.h"

#include <signal.h>

#include <chrono>
#include <filesystem>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing {

namespace fs = std::filesystem;
using nlohmann::json;

Result<std::unique_ptr<FakeKube>> FakeKube::Start(const std::string& dir, Options o) {
  std::unique_ptr<FakeKube> k(new FakeKube());
  k->dir_ = dir;
  k->token_ = o.token;
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "pods", ec);
  k->ca_file_ = dir + "/ca.crt";
  const std::string key = dir + "/server.key";
  // A certificate for 127.0.0.1, made now (openssl's command line).
  auto gen = k->runner_.Spawn({{"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                                "-keyout", key, "-out", k->ca_file_, "-subj", "/CN=127.0.0.1",
                                "-addext", "subjectAltName=IP:127.0.0.1", "-days", "2"},
                               {},
                               dir,
                               dir + "/openssl.log"});
  if (!gen) return std::unexpected(gen.error().Wrap("fake kube: openssl"));
  if (auto st = k->runner_.Wait(*gen); !st.ok()) {
    return Fail(ErrorKind::kInternal, "fake kube: openssl req: " + st.Describe() + ": " +
                                          ReadFile(dir + "/openssl.log").value_or(""));
  }
  k->token_file_ = dir + "/api-token";
  TRY(WriteFile(k->token_file_, o.token + "\n"));
  const std::string port_file = dir + "/port";
  std::vector<std::string> argv = {"python3", std::string(TRAINQ_SOURCE_DIR) +
                                                  "/tests/support/fake_kube.py",
                                   "--dir", dir + "/pods", "--port-file", port_file,
                                   "--token", o.token, "--tls-cert", k->ca_file_,
                                   "--tls-key", key, "--node-gpus", std::to_string(o.node_gpus)};
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  auto pid = k->runner_.Spawn({argv, {}, dir, dir + "/fake_kube.log"});
  if (!pid) return std::unexpected(pid.error().Wrap("fake kube"));
  k->pid_ = *pid;
  std::string port;
  bool up = WaitFor(
      [&] {
        if (auto p = ReadFile(port_file)) port = std::string(Trim(*p));
        return !port.empty() || k->runner_.Poll(k->pid_).has_value();
      },
      std::chrono::seconds(20));
  if (!up || port.empty()) {
    return Fail(ErrorKind::kUnavailable, "fake kube did not start: " + k->Log());
  }
  k->url_ = "https://127.0.0.1:" + port;
  return k;
}

FakeKube::~FakeKube() {
  if (pid_ > 0) {
    runner_.KillGroup(pid_, SIGTERM);  // it kills its pods' processes
    runner_.Wait(pid_);
  }
}

std::string FakeKube::Log() const { return ReadFile(dir_ + "/fake_kube.log").value_or(""); }

std::string FakeKube::Kubeconfig(const std::string& ns) const {
  const std::string path = dir_ + "/kubeconfig-" + ns;
  (void)WriteFile(path,
                  "apiVersion: v1\n"
                  "kind: Config\n"
                  "current-context: fake\n"
                  "clusters:\n"
                  "- name: fake-cluster\n"
                  "  cluster:\n"
                  "    server: " + url_ + "\n"
                  "    certificate-authority: ca.crt\n"
                  "contexts:\n"
                  "- name: fake\n"
                  "  context:\n"
                  "    cluster: fake-cluster\n"
                  "    user: trainq\n"
                  "    namespace: " + ns + "\n"
                  "users:\n"
                  "- name: trainq\n"
                  "  user:\n"
                  "    tokenFile: api-token\n");
  return path;
}

Result<HttpResponse> FakeKube::Send(const std::string& method, const std::string& path,
                                    const std::string& body) const {
  CurlHttpClient http;
  HttpRequest req;
  req.method = method;
  req.url = url_ + path;
  req.headers = {{"Authorization", "Bearer " + token_}, {"Content-Type", "application/json"}};
  req.body = body;
  req.ca_file = ca_file_;
  return http.Send(req);
}

Result<json> FakeKube::Get(const std::string& path) const {
  ASSIGN_OR_RETURN(auto r, Send("GET", path, ""));
  if (r.status != 200) {
    return Fail(ErrorKind::kInternal, "GET " + path + ": HTTP " + std::to_string(r.status) + ": " + r.body);
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Fail(ErrorKind::kCorruption, "GET " + path + ": not JSON");
  return j;
}

Result<json> FakeKube::Pods() const {
  ASSIGN_OR_RETURN(auto j, Get("/api/v1/pods"));
  return j["items"];
}

Result<json> FakeKube::Secrets() const { return Get("/fake/secrets"); }
Result<json> FakeKube::Requests() const { return Get("/fake/requests"); }

Status FakeKube::Control(const std::string& what, const json& body) const {
  ASSIGN_OR_RETURN(auto r, Send("POST", "/fake/" + what, body.dump()));
  if (r.status != 200) {
    return Fail(ErrorKind::kInternal, "fake " + what + ": HTTP " + std::to_string(r.status) + ": " + r.body);
  }
  return {};
}

}  // namespace trainq::testing
