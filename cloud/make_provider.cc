// MakeProvider: the provider kinds and the parameters each one takes.
#include <set>

#include "cloud/command_provider.h"
#include "cloud/ec2_provider.h"
#include "cloud/kubernetes_provider.h"
#include "cloud/local_provider.h"
#include "cloud/provider.h"
#include "cloud/slurm_provider.h"
#include "core/strings.h"

namespace trainq::cloud {

namespace {

// Parameters of the worker command line that trainq builds (docs/pools.md,
// "A pool's settings"), accepted by every kind and not used by the providers
// themselves.
const std::set<std::string>& WorkerParams() {
  static const std::set<std::string> k = {"server_url", "token_file", "trainq", "worker_gpus",
                                          "worker_data_dir"};
  return k;
}

Status CheckParams(const std::string& kind, const std::map<std::string, std::string>& params,
                   const std::set<std::string>& allowed, const std::set<std::string>& required) {
  for (const auto& [k, v] : params) {
    if (!allowed.count(k) && !WorkerParams().count(k)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Fail(ErrorKind::kInvalidArgument,
                  "params." + k + ": unknown to " + kind + " (expected one of: " + list + ")");
    }
  }
  for (const auto& r : required) {
    auto it = params.find(r);
    if (it == params.end() || Trim(it->second).empty()) {
      return Fail(ErrorKind::kInvalidArgument, "params." + r + ": required by " + kind);
    }
  }
  return {};
}

Result<std::int64_t> DurationMs(const std::map<std::string, std::string>& params,
                                const std::string& key, std::int64_t fallback) {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  auto s = ParseDurationSeconds(it->second);
  if (!s) return Fail(ErrorKind::kInvalidArgument, "params." + key + ": " + s.error().message);
  return *s * 1000;
}

Status Need(bool ok, const std::string& kind, const char* what) {
  if (ok) return {};
  return Fail(ErrorKind::kInternal, std::string(kind) + " provider needs " + what);
}

}  // namespace

Status CheckProviderParams(const std::string& kind,
                           const std::map<std::string, std::string>& params) {
  if (kind == "local") {
    TRY(CheckParams(kind, params, {"stop_grace", "stop_wait"}, {}));
    TRY(DurationMs(params, "stop_grace", 0));
    TRY(DurationMs(params, "stop_wait", 0));
    return {};
  }
  if (kind == "slurm") {
    TRY(CheckParams(kind, params,
                    {"partition", "account", "gres", "cpus", "time", "output", "extra_args",
                     "slurm_conf", "bin_dir", "timeout"},
                    {}));
    TRY(DurationMs(params, "timeout", 0));
    if (auto it = params.find("cpus"); it != params.end()) {
      if (it->second.empty() ||
          it->second.find_first_not_of("0123456789") != std::string::npos) {
        return Fail(ErrorKind::kInvalidArgument,
                    "params.cpus: expected a number, got \"" + it->second + "\"");
      }
    }
    return {};
  }
  if (kind == "ec2") {
    TRY(CheckParams(kind, params,
                    {"region", "image", "instance_type", "subnet", "security_groups", "key_name",
                     "iam_instance_profile", "market", "max_price", "user_data_prefix",
                     "endpoint", "credentials_file", "profile", "on_stop"},
                    {"region", "image", "instance_type"}));
    if (auto it = params.find("market");
        it != params.end() && it->second != "spot" && it->second != "on-demand") {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.market: expected spot or on-demand, got \"" + it->second + "\"");
    }
    if (auto it = params.find("on_stop");
        it != params.end() && it->second != "terminate" && it->second != "stop") {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.on_stop: expected terminate or stop, got \"" + it->second + "\"");
    }
    if (auto it = params.find("endpoint"); it != params.end() &&
                                           !StartsWith(it->second, "https://") &&
                                           !StartsWith(it->second, "http://")) {
      return Fail(ErrorKind::kInvalidArgument, "params.endpoint: expected an http(s) URL");
    }
    return {};
  }
  if (kind == "kubernetes") {
    TRY(CheckParams(kind, params, KubernetesParams(), {"image"}));
    return CheckKubernetesParams(params);
  }
  if (kind == "command") {
    TRY(CheckParams(kind, params, {"boot", "list", "stop", "timeout"}, {"boot", "list", "stop"}));
    TRY(DurationMs(params, "timeout", 0));
    return {};
  }
  return Fail(ErrorKind::kInvalidArgument,
              "provider: unknown kind \"" + kind +
                  "\" (expected local, slurm, ec2, kubernetes or command)");
}

Result<std::unique_ptr<Provider>> MakeProvider(const std::string& kind,
                                               const std::map<std::string, std::string>& params,
                                               ProviderDeps deps) {
  TRY(CheckProviderParams(kind, params));
  std::string scratch = deps.state_dir.empty() ? "" : deps.state_dir + "/tmp";
  if (kind == "local") {
    ASSIGN_OR_RETURN(auto grace, DurationMs(params, "stop_grace", 30'000));
    ASSIGN_OR_RETURN(auto wait, DurationMs(params, "stop_wait", 2'000));
    TRY(Need(deps.runner && deps.clock && !deps.state_dir.empty(), kind,
             "a process runner, a clock and a state directory"));
    return std::make_unique<LocalProvider>(deps.runner, deps.clock, deps.state_dir, grace, wait);
  }
  if (kind == "slurm") {
    TRY(Need(deps.runner != nullptr, kind, "a process runner"));
    return std::make_unique<SlurmProvider>(deps.runner, params, scratch);
  }
  if (kind == "ec2") {
    TRY(Need(deps.http != nullptr, kind, "an HTTP client"));
    return std::make_unique<Ec2Provider>(deps.http, params);
  }
  if (kind == "kubernetes") {
    TRY(Need(deps.http != nullptr, kind, "an HTTP client"));
    ASSIGN_OR_RETURN(auto endpoint, ResolveKubeEndpoint(params));
    return std::make_unique<KubernetesProvider>(deps.http, params, std::move(endpoint));
  }
  TRY(Need(deps.runner != nullptr, kind, "a process runner"));
  return std::make_unique<CommandProvider>(deps.runner, params, scratch);
}

}  // namespace trainq::cloud
