// The fake Kubernetes API server (tests/support/fake_kube.py) as a test
// fixture: started on loopback over HTTPS with a fresh self-signed
// certificate and a bearer token, stopped (with every pod's process) when
// destroyed. The pods' containers run as local processes under dir/pods/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/http_client.h"
#include "core/process.h"
#include "core/result.h"

namespace trainq::testing {

class FakeKube {
 public:
  struct Options {
    std::string token = "fake-api-token-0123";
    int node_gpus = 0;
    std::vector<std::string> extra_args = {};
  };
  // Starts it in `dir` (created); an error says what failed (no python3, no
  // openssl, no port within 20 s).
  static Result<std::unique_ptr<FakeKube>> Start(const std::string& dir, Options options);
  static Result<std::unique_ptr<FakeKube>> Start(const std::string& dir) {
    return Start(dir, Options{});
  }
  ~FakeKube();

  const std::string& url() const { return url_; }         // https://127.0.0.1:PORT
  const std::string& ca_file() const { return ca_file_; }
  const std::string& token_file() const { return token_file_; }
  const std::string& token() const { return token_; }
  // A kubeconfig naming this server, its CA and token (context "fake",
  // namespace `ns`); its path.
  std::string Kubeconfig(const std::string& ns) const;
  // The fake's own log (stderr of the server, not the pods').
  std::string Log() const;

  // An API GET (with the token), its JSON; any non-200 is an Error.
  Result<nlohmann::json> Get(const std::string& path) const;
  // The pods (all namespaces), the secrets (all namespaces), and every API
  // request made so far (method, path, body).
  Result<nlohmann::json> Pods() const;
  Result<nlohmann::json> Secrets() const;
  Result<nlohmann::json> Requests() const;
  // A test control (POST /fake/...): disrupt/NS/NAME, evict/NS/NAME, node,
  // quota, forbid.
  Status Control(const std::string& what, const nlohmann::json& body = nlohmann::json::object()) const;

 private:
  FakeKube() = default;
  Result<HttpResponse> Send(const std::string& method, const std::string& path,
                            const std::string& body) const;

  PosixProcessRunner runner_;
  int pid_ = 0;
  std::string dir_, url_, ca_file_, token_file_, token_;
};

}  // namespace trainq::testing
