// The Kubernetes provider: each machine is one bare Pod running `trainq
// worker`, created and watched over the API server's REST interface (core/v1)
// through HttpClient, JSON with nlohmann.
//
//   Boot: the pool's token goes into a Secret (created on the first boot,
//         replaced when the token changed, deleted with the pool's last pod)
//         mounted read-only as the worker's --token-file; it is never in the
//         pod's command, args or env. The pod is named after BootSpec::name
//         (a retried Boot answers 409 AlreadyExists and adopts the pod when it
//         carries this pool's labels), labelled with trainq's instance, pool
//         and machine, `restartPolicy: Never`, the worker's command line as
//         explicit `command` + `args`, requests = limits for cpu, memory and
//         the GPU resource (gpus of the pool), `securityContext.fsGroup`
//         (params.fs_group, default 2000: the kubelet then lets the image's
//         non-root worker read its 0400 token), and for the run sandbox
//         `hostUsers` (params.host_users) and the container's `procMount`
//         (params.proc_mount; Unmasked only with host_users: false).
//   List: the pods with this instance's and pool's labels (a paced list call,
//         no watch, so there is no 410 Gone to relist after). Per pod:
//           Pending, PodScheduled=False/Unschedulable -> note: the scheduler's
//             message (the last FailedScheduling event, else the condition's);
//           Pending with a container waiting on ErrImagePull, ImagePullBackOff,
//             InvalidImageName, CreateContainerConfigError or
//             CreateContainerError -> ended (a failed boot, at once);
//           DisruptionTarget=True, status.reason Evicted, or a deletion that
//             trainq did not ask for -> ended, disrupted (runs back to the
//             queue, no attempt used, no failed boot);
//           Succeeded / Failed -> ended: its worker exited.
//   Stop: DELETE with gracePeriodSeconds = params.stop_grace (default 30 s),
//         404 = already gone; then, when no pod of the pool is left (or all
//         are terminating), the Secret is deleted.
//   LogTail: the pod's log (tailLines, limitBytes).
//
// API errors: 401 and 403 name the verb and the resource ("forbidden: create
// pods in namespace ml"), not retried any faster than the pool's back-off;
// 403 "exceeded quota", 429 and 5xx are unavailable (capacity: back-off).
//
// The API server and credentials, in this order: params.api_server (+
// api_token_file, the bearer token, re-read at each call; + ca_file); else
// params.kubeconfig (+ context; its cluster's server and CA, its user's
// token, tokenFile or client certificate; exec and auth-provider plugins are
// refused); else in-cluster: KUBERNETES_SERVICE_HOST/PORT and the service
// account's token, ca.crt and namespace under
// /var/run/secrets/kubernetes.io/serviceaccount/.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "cloud/provider.h"
#include "core/http_client.h"

namespace trainq::cloud {

// The parameters kubernetes takes (besides the worker's common ones), and
// their checks without touching files (for the config parser).
// An `api_server: http://...` is refused unless params.allow_insecure is true
// (the API token would travel in clear).
const std::set<std::string>& KubernetesParams();
Status CheckKubernetesParams(const std::map<std::string, std::string>& params);
// params.allow_insecure: true or false (absent: false).
Result<bool> AllowsInsecure(const std::map<std::string, std::string>& params);

// Where and how to reach the API server.
struct KubeEndpoint {
  std::string server;  // "https://host:port", no trailing slash
  std::string ca_file;
  std::string ca_pem;
  std::string token;       // a static bearer token (kubeconfig `token`)
  std::string token_file;  // read at each call
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_;  // the context's (or the service account's), "" if none
  std::string source;      // for messages: "kubeconfig /x (context c)"
};

// Resolves the endpoint from the parameters (see the header comment).
Result<KubeEndpoint> ResolveKubeEndpoint(const std::map<std::string, std::string>& params);
// Reads one kubeconfig (`context` "" = its current-context). Errors name the
// file, line and key. A plain-HTTP `server` is refused unless
// `allow_insecure` (the pool's params.allow_insecure: true).
Result<KubeEndpoint> ReadKubeconfig(const std::string& path, const std::string& context,
                                    bool allow_insecure = false);

// A DNS-1123 name (lowercase alphanumerics and '-', at most `max` long) made
// from `s`; a hash of `s` is appended when anything had to change.
std::string KubeName(const std::string& s, std::size_t max = 63);

class KubernetesProvider final : public Provider {
 public:
  KubernetesProvider(HttpClient* http, std::map<std::string, std::string> params,
                     KubeEndpoint endpoint);

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;
  Result<std::string> LogTail(const std::string& id, const std::string& name,
                              std::size_t max_bytes) override;

  // The pod and the Secret Boot would create (for tests and docs).
  nlohmann::json PodFor(const BootSpec& spec) const;
  std::string SecretName(const MachineTag& tag) const;
  const std::string& ns() const { return namespace_; }

 private:
  struct Reply {
    int status = 0;
    nlohmann::json body;
    std::string text;
  };
  // One API call; transport errors are Errors, any HTTP status a Reply.
  Result<Reply> Call(const std::string& method, const std::string& path,
                     const nlohmann::json* body, std::int64_t timeout_ms = 30'000) const;
  // The Error for a reply that is not a success: `verb` and `resource` name
  // what was refused ("create", "pods").
  Error ApiError(const Reply& r, const std::string& verb, const std::string& resource) const;
  Status EnsureSecret(const BootSpec& spec);
  Status DeleteSecretIfUnused(const MachineTag& tag);
  bool Deleting(const std::string& pod);
  std::string Selector(const MachineTag& tag) const;
  std::string Param(const std::string& key) const;
  // The last FailedScheduling event's message for pod `name`, "" if none.
  std::string SchedulingMessage(const std::string& name) const;

  HttpClient* http_;
  std::map<std::string, std::string> params_;
  KubeEndpoint endpoint_;
  std::string namespace_;
  std::int64_t stop_grace_s_ = 30;
  // Boot runs on the fleet's boot threads, List and Stop on its loop (see
  // cloud/provider.h): mu_ guards the two below; secret_mu_ is held shared
  // by a Boot from its Secret to its pod, and taken (try_lock, never
  // waiting) by Stop's Secret clean-up, which is skipped while boots run.
  std::mutex mu_;
  std::optional<MachineTag> tag_;  // from the last Boot or List (Stop's Secret clean-up)
  std::set<std::string> deleting_;  // pods this provider asked to delete
  std::shared_mutex secret_mu_;
};

}  // namespace trainq::cloud
