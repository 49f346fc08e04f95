#include "cloud/kubernetes_provider.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cloud/ec2_provider.h"  // Base64Encode, DecodeBase64
#include "core/crypto.h"
#include "core/strings.h"
#include "core/yaml_reader.h"

namespace trainq::cloud {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kLabelInstance = "trainq.dev/instance";
constexpr const char* kLabelPool = "trainq.dev/pool";
constexpr const char* kLabelMachine = "trainq.dev/machine";
constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
// Where the pool token's Secret is mounted when params.token_file is not set.
constexpr const char* kTokenPath = "/var/run/secrets/trainq/token";

// Waiting reasons after which the container never starts by itself.
bool FatalWaiting(const std::string& reason) {
  return reason == "ErrImagePull" || reason == "ImagePullBackOff" ||
         reason == "InvalidImageName" || reason == "CreateContainerConfigError" ||
         reason == "CreateContainerError" || reason == "ErrImageNeverPull";
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends.
std::string LabelValue(const std::string& s) {
  bool ok = !s.empty() && s.size() <= 63 && std::isalnum(static_cast<unsigned char>(s.front())) &&
            std::isalnum(static_cast<unsigned char>(s.back()));
  for (char c : s) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  }
  return ok ? s : KubeName(s);
}

// "k=v,k2=v2" or a JSON object of strings.
Result<std::map<std::string, std::string>> StringMap(const std::string& key,
                                                     const std::string& text) {
  std::map<std::string, std::string> out;
  auto t = std::string(Trim(text));
  if (t.empty()) return out;
  if (t.front() == '{') {
    auto j = json::parse(t, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return Fail(ErrorKind::kInvalidArgument, "params." + key + ": expected a mapping");
    }
    for (const auto& [k, v] : j.items()) {
      if (!v.is_string() && !v.is_number() && !v.is_boolean()) {
        return Fail(ErrorKind::kInvalidArgument,
                    "params." + key + "." + k + ": expected a string");
      }
      out[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    return out;
  }
  for (const auto& item : Split(t, ',')) {
    auto kv = std::string(Trim(item));
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  "params." + key + ": expected a mapping or key=value,key=value, got \"" + kv +
                      "\"");
    }
    out[std::string(Trim(kv.substr(0, eq)))] = std::string(Trim(kv.substr(eq + 1)));
  }
  return out;
}

// "a,b" or a JSON list of strings.
Result<std::vector<std::string>> StringList(const std::string& key, const std::string& text) {
  std::vector<std::string> out;
  auto t = std::string(Trim(text));
  if (t.empty()) return out;
  if (t.front() == '[') {
    auto j = json::parse(t, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      return Fail(ErrorKind::kInvalidArgument, "params." + key + ": expected a list");
    }
    for (const auto& v : j) {
      if (!v.is_string()) {
        return Fail(ErrorKind::kInvalidArgument, "params." + key + ": expected names");
      }
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  for (const auto& item : Split(t, ',')) {
    auto v = std::string(Trim(item));
    if (!v.empty()) out.push_back(v);
  }
  return out;
}

// A list of tolerations, each a mapping of key, operator, value, effect,
// tolerationSeconds; a bare string "key[=value][:effect]" is one too.
Result<json> Tolerations(const std::string& text) {
  json out = json::array();
  auto t = std::string(Trim(text));
  if (t.empty()) return out;
  if (t.front() != '[') {
    for (const auto& item : Split(t, ',')) {
      std::string s(Trim(item));
      if (s.empty()) continue;
      json tol = json::object();
      if (auto colon = s.rfind(':'); colon != std::string::npos) {
        tol["effect"] = s.substr(colon + 1);
        s = s.substr(0, colon);
      }
      if (auto eq = s.find('='); eq != std::string::npos) {
        tol["key"] = s.substr(0, eq);
        tol["operator"] = "Equal";
        tol["value"] = s.substr(eq + 1);
      } else {
        tol["key"] = s;
        tol["operator"] = "Exists";
      }
      out.push_back(tol);
    }
    return out;
  }
  auto j = json::parse(t, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return Fail(ErrorKind::kInvalidArgument, "params.tolerations: expected a list");
  }
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = "params.tolerations[" + std::to_string(i) + "]";
    if (!j[i].is_object()) return Fail(ErrorKind::kInvalidArgument, at + ": expected a mapping");
    json tol = json::object();
    for (const auto& [k, v] : j[i].items()) {
      if (k == "tolerationSeconds") {
        std::int64_t secs = 0;
        bool ok = v.is_number_integer();
        if (ok) secs = v.get<std::int64_t>();
        if (v.is_string()) {
          try {
            size_t used = 0;
            secs = std::stoll(v.get<std::string>(), &used);
            ok = used == v.get<std::string>().size();
          } catch (...) {
          }
        }
        if (!ok) return Fail(ErrorKind::kInvalidArgument, at + ".tolerationSeconds: expected seconds");
        tol[k] = secs;
      } else if (k == "key" || k == "operator" || k == "value" || k == "effect") {
        if (!v.is_string()) return Fail(ErrorKind::kInvalidArgument, at + "." + k + ": expected a string");
        tol[k] = v;
      } else {
        return Fail(ErrorKind::kInvalidArgument,
                    at + "." + k +
                        ": unknown key (expected one of: effect, key, operator, tolerationSeconds, "
                        "value)");
      }
    }
    if (auto op = Str(tol, "operator"); !op.empty() && op != "Exists" && op != "Equal") {
      return Fail(ErrorKind::kInvalidArgument, at + ".operator: expected Exists or Equal");
    }
    out.push_back(tol);
  }
  return out;
}

// A resource quantity as Kubernetes writes them: 4, 500m, 1.5, 16Gi, 1e3.
bool Quantity(const std::string& s) {
  if (s.empty()) return false;
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  size_t digits = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) {
    ++i;
    ++digits;
  }
  if (digits == 0) return false;
  static const std::set<std::string> kSuffix = {"",  "m", "k", "M", "G", "T", "P", "E",
                                                "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  std::string rest = s.substr(i);
  if (kSuffix.count(rest)) return true;
  if (rest.size() >= 2 && (rest[0] == 'e' || rest[0] == 'E')) {
    return rest.find_first_not_of("0123456789+-", 1) == std::string::npos;
  }
  return false;
}

std::string Dir(const std::string& file) { return fs::path(file).parent_path().string(); }

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) return path;
  return (fs::path(base_dir) / path).string();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string KubeName(const std::string& s, std::size_t max) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out == s && out.size() <= max) return out;
  std::string hash = Sha256Hex(s).substr(0, 8);
  if (out.size() + 1 + hash.size() > max) out.resize(max - 1 - hash.size());
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "tq-" + hash : out + "-" + hash;
}

Result<bool> AllowsInsecure(const std::map<std::string, std::string>& p) {
  auto it = p.find("allow_insecure");
  if (it == p.end()) return false;
  auto v = Trim(it->second);
  if (v == "true") return true;
  if (v == "false" || v.empty()) return false;
  return Fail(ErrorKind::kInvalidArgument,
              "params.allow_insecure: expected true or false, got \"" + it->second + "\"");
}

const std::set<std::string>& KubernetesParams() {
  static const std::set<std::string> k = {
      "namespace", "image", "image_pull_policy", "kubeconfig", "context", "api_server",
      "api_token_file", "ca_file", "gpu_resource", "cpu", "memory", "node_selector",
      "tolerations", "service_account", "image_pull_secrets", "labels", "annotations",
      "priority_class", "stop_grace", "host_users", "proc_mount", "fs_group", "allow_insecure"};
  return k;
}

Status CheckKubernetesParams(const std::map<std::string, std::string>& p) {
  auto has = [&](const char* k) { return p.count(k) && !Trim(p.at(k)).empty(); };
  if (has("kubeconfig") && has("api_server")) {
    return Fail(ErrorKind::kInvalidArgument,
                "params.api_server: give either kubeconfig or api_server, not both");
  }
  for (const char* k : {"api_token_file", "ca_file"}) {
    if (has(k) && !has("api_server")) {
      return Fail(ErrorKind::kInvalidArgument,
                  std::string("params.") + k + ": only with api_server (a kubeconfig names its own)");
    }
  }
  if (has("context") && !has("kubeconfig")) {
    return Fail(ErrorKind::kInvalidArgument, "params.context: only with kubeconfig");
  }
  if (has("api_server") && !StartsWith(p.at("api_server"), "https://") &&
      !StartsWith(p.at("api_server"), "http://")) {
    return Fail(ErrorKind::kInvalidArgument, "params.api_server: expected an http(s) URL");
  }
  TRY(AllowsInsecure(p));
  if (has("api_server") && StartsWith(Trim(p.at("api_server")), "http://") &&
      !*AllowsInsecure(p)) {
    return Fail(ErrorKind::kInvalidArgument,
                "params.api_server: " + std::string(Trim(p.at("api_server"))) +
                    " is plain HTTP: the API token would travel in clear. Use https:// (with "
                    "ca_file), or set params.allow_insecure: true for a cluster reached over a "
                    "trusted network");
  }
  if (has("namespace")) {
    const auto& ns = p.at("namespace");
    if (KubeName(ns) != ns) {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.namespace: \"" + ns + "\" is not a namespace name (lowercase letters, "
                  "digits and '-', at most 63)");
    }
  }
  for (const char* k : {"cpu", "memory"}) {
    if (has(k) && !Quantity(std::string(Trim(p.at(k))))) {
      return Fail(ErrorKind::kInvalidArgument, std::string("params.") + k +
                                                   ": expected a quantity (4, 500m, 16Gi), got \"" +
                                                   p.at(k) + "\"");
    }
  }
  if (has("image_pull_policy")) {
    const auto& v = p.at("image_pull_policy");
    if (v != "Always" && v != "IfNotPresent" && v != "Never") {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.image_pull_policy: expected Always, IfNotPresent or Never");
    }
  }
  if (has("stop_grace")) {
    auto s = ParseDurationSeconds(p.at("stop_grace"));
    if (!s) return Fail(ErrorKind::kInvalidArgument, "params.stop_grace: " + s.error().message);
  }
  for (const char* k : {"node_selector", "labels", "annotations"}) {
    if (has(k)) TRY(StringMap(k, p.at(k)));
  }
  if (has("labels")) {
    auto m = StringMap("labels", p.at("labels"));
    for (const auto& [k, v] : *m) {
      if (k.starts_with("trainq.dev/")) {
        return Fail(ErrorKind::kInvalidArgument,
                    "params.labels." + k + ": trainq.dev/ labels are trainq's own");
      }
      if (LabelValue(v) != v && !v.empty()) {
        return Fail(ErrorKind::kInvalidArgument,
                    "params.labels." + k + ": \"" + v +
                        "\" is not a label value (at most 63 of letters, digits, '-', '_', '.')");
      }
    }
  }
  if (has("host_users")) {
    const auto& v = p.at("host_users");
    if (v != "true" && v != "false") {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.host_users: expected true or false (false: the pod gets its own user "
                  "namespace)");
    }
  }
  if (has("proc_mount")) {
    const auto& v = p.at("proc_mount");
    if (v != "Default" && v != "Unmasked") {
      return Fail(ErrorKind::kInvalidArgument, "params.proc_mount: expected Default or Unmasked");
    }
    // The API server refuses it otherwise (Kubernetes 1.30 and later).
    if (v == "Unmasked" && !(has("host_users") && p.at("host_users") == "false")) {
      return Fail(ErrorKind::kInvalidArgument,
                  "params.proc_mount: Unmasked needs host_users: false (Kubernetes gives an "
                  "unmasked /proc only to a pod in its own user namespace)");
    }
  }
  if (has("fs_group")) {
    const std::string v(Trim(p.at("fs_group")));
    bool ok = v == "none";
    if (!ok) {
      ok = !v.empty() && v.size() <= 10 && v.find_first_not_of("0123456789") == std::string::npos;
      const bool userns = has("host_users") && p.at("host_users") == "false";
      if (ok && std::stoll(v) > (userns ? 65535LL : 4294967294LL)) ok = false;
      if (!ok) {
        return Fail(ErrorKind::kInvalidArgument,
                    "params.fs_group: expected a group id" +
                        std::string(userns ? " from 0 to 65535 (host_users: false)" : "") +
                        ", or none, got \"" + v + "\"");
      }
    }
  }
  if (has("image_pull_secrets")) TRY(StringList("image_pull_secrets", p.at("image_pull_secrets")));
  if (has("tolerations")) TRY(Tolerations(p.at("tolerations")));
  return {};
}

Result<KubeEndpoint> ReadKubeconfig(const std::string& path, const std::string& context,
                                    bool allow_insecure) {
  ASSIGN_OR_RETURN(auto text, ReadFile(path));
  YamlReader y(path);
  ASSIGN_OR_RETURN(auto root, y.Load(text, "not a kubeconfig (invalid YAML)"));
  if (!root.IsMap()) return y.Err(root, "", "expected a kubeconfig (a mapping)");
  std::string want = context;
  if (want.empty()) {
    if (auto c = root["current-context"]) { ASSIGN_OR_RETURN(want, y.Str(c, "current-context")); }
  }
  if (want.empty()) {
    return y.Err(root, "current-context",
                 "none set: name one with the pool's params.context");
  }
  auto find = [&](const char* list, const std::string& name) -> Result<YAML::Node> {
    auto seq = root[list];
    if (seq && seq.IsSequence()) {
      for (std::size_t i = 0; i < seq.size(); ++i) {
        if (seq[i].IsMap() && seq[i]["name"] && seq[i]["name"].IsScalar() &&
            seq[i]["name"].Scalar() == name) {
          return seq[i];
        }
      }
    }
    return y.Err(seq ? seq : root, list, "no entry named \"" + name + "\"");
  };
  ASSIGN_OR_RETURN(auto ctx_entry, find("contexts", want));
  auto ctx = ctx_entry["context"];
  if (!ctx || !ctx.IsMap()) return y.Err(ctx_entry, "contexts." + want, "no context mapping");
  KubeEndpoint e;
  e.source = "kubeconfig " + path + " (context " + want + ")";
  if (auto ns = ctx["namespace"]) { ASSIGN_OR_RETURN(e.namespace_, y.Str(ns, "contexts." + want + ".namespace")); }
  std::string cluster_name, user_name;
  if (auto c = ctx["cluster"]) { ASSIGN_OR_RETURN(cluster_name, y.Str(c, "contexts." + want + ".cluster")); }
  if (auto u = ctx["user"]) { ASSIGN_OR_RETURN(user_name, y.Str(u, "contexts." + want + ".user")); }
  const std::string base = Dir(path);

  ASSIGN_OR_RETURN(auto cluster_entry, find("clusters", cluster_name));
  auto cluster = cluster_entry["cluster"];
  const std::string cpath = "clusters." + cluster_name + ".cluster";
  if (!cluster || !cluster.IsMap()) return y.Err(cluster_entry, cpath, "no cluster mapping");
  if (auto s = cluster["server"]) {
    ASSIGN_OR_RETURN(e.server, y.NonEmptyStr(s, cpath + ".server"));
    if (StartsWith(e.server, "http://") && !allow_insecure) {
      return y.Err(s, cpath + ".server",
                   e.server + " is plain HTTP: the credentials would travel in clear. Use "
                   "https://, or set the pool's params.allow_insecure: true for a cluster "
                   "reached over a trusted network");
    }
  }
  if (e.server.empty()) return y.Err(cluster, cpath + ".server", "missing");
  while (e.server.ends_with("/")) e.server.pop_back();
  if (auto ca = cluster["certificate-authority-data"]) {
    ASSIGN_OR_RETURN(auto b64, y.Str(ca, cpath + ".certificate-authority-data"));
    auto pem = DecodeBase64(b64);
    if (!pem) return y.Err(ca, cpath + ".certificate-authority-data", "not base64");
    e.ca_pem = *pem;
  } else if (auto caf = cluster["certificate-authority"]) {
    ASSIGN_OR_RETURN(auto f, y.Str(caf, cpath + ".certificate-authority"));
    e.ca_file = Resolve(base, f);
  }
  if (auto insecure = cluster["insecure-skip-tls-verify"]) {
    ASSIGN_OR_RETURN(bool skip, y.Bool(insecure, cpath + ".insecure-skip-tls-verify"));
    if (skip) {
      return y.Err(insecure, cpath + ".insecure-skip-tls-verify",
                   "not supported: trainq verifies the API server's certificate (give "
                   "certificate-authority)");
    }
  }

  if (!user_name.empty()) {
    ASSIGN_OR_RETURN(auto user_entry, find("users", user_name));
    auto user = user_entry["user"];
    const std::string upath = "users." + user_name + ".user";
    if (user && user.IsMap()) {
      for (const char* plugin : {"exec", "auth-provider"}) {
        if (user[plugin]) {
          return y.Err(user[plugin], upath + "." + plugin,
                       "credential plugins are not supported: give the pool a kubeconfig with a "
                       "token, tokenFile or client certificate (e.g. a service account's token), "
                       "or params.api_server + api_token_file");
        }
      }
      if (auto t = user["token"]) { ASSIGN_OR_RETURN(e.token, y.Str(t, upath + ".token")); }
      if (auto t = user["tokenFile"]) {
        ASSIGN_OR_RETURN(auto f, y.Str(t, upath + ".tokenFile"));
        e.token_file = Resolve(base, f);
      }
      auto pem = [&](const char* data_key, const char* file_key,
                     std::string& out) -> Status {
        if (auto d = user[data_key]) {
          ASSIGN_OR_RETURN(auto b64, y.Str(d, upath + "." + data_key));
          auto v = DecodeBase64(b64);
          if (!v) return y.Err(d, upath + "." + data_key, "not base64");
          out = *v;
        } else if (auto f = user[file_key]) {
          ASSIGN_OR_RETURN(auto name, y.Str(f, upath + "." + file_key));
          auto v = ReadFile(Resolve(base, name));
          if (!v) return y.Err(f, upath + "." + file_key, v.error().message);
          out = *v;
        }
        return {};
      };
      TRY(pem("client-certificate-data", "client-certificate", e.client_cert_pem));
      TRY(pem("client-key-data", "client-key", e.client_key_pem));
    }
  }
  return e;
}

Result<KubeEndpoint> ResolveKubeEndpoint(const std::map<std::string, std::string>& params) {
  auto get = [&](const char* k) {
    auto it = params.find(k);
    return it == params.end() ? std::string() : std::string(Trim(it->second));
  };
  if (auto server = get("api_server"); !server.empty()) {
    KubeEndpoint e;
    e.server = server;
    while (e.server.ends_with("/")) e.server.pop_back();
    e.token_file = get("api_token_file");
    e.ca_file = get("ca_file");
    e.source = "params.api_server " + e.server;
    if (!e.token_file.empty()) {
      if (auto t = ReadFile(e.token_file); !t) {
        return Fail(ErrorKind::kInvalidArgument, "params.api_token_file: " + t.error().message);
      }
    }
    if (!e.ca_file.empty() && !fs::exists(e.ca_file)) {
      return Fail(ErrorKind::kInvalidArgument, "params.ca_file: " + e.ca_file + ": no such file");
    }
    return e;
  }
  if (auto kc = get("kubeconfig"); !kc.empty()) {
    auto e = ReadKubeconfig(kc, get("context"), AllowsInsecure(params).value_or(false));
    if (!e) return std::unexpected(e.error().Wrap("params.kubeconfig"));
    return e;
  }
  const std::string host = Env("KUBERNETES_SERVICE_HOST");
  const std::string port = Env("KUBERNETES_SERVICE_PORT");
  const std::string dir = kServiceAccountDir;
  if (host.empty() || !fs::exists(dir + "/token")) {
    return Fail(ErrorKind::kInvalidArgument,
                "params: no kubeconfig and no api_server, and not inside a cluster "
                "(KUBERNETES_SERVICE_HOST unset or no " +
                    dir + "/token): say where the API server is");
  }
  KubeEndpoint e;
  e.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
             (port.empty() ? "443" : port);
  e.token_file = dir + "/token";
  e.ca_file = dir + "/ca.crt";
  if (auto ns = ReadFile(dir + "/namespace")) e.namespace_ = std::string(Trim(*ns));
  e.source = "in-cluster service account";
  return e;
}

KubernetesProvider::KubernetesProvider(HttpClient* http, std::map<std::string, std::string> params,
                                       KubeEndpoint endpoint)
    : http_(http), params_(std::move(params)), endpoint_(std::move(endpoint)) {
  namespace_ = Param("namespace");
  if (namespace_.empty()) namespace_ = endpoint_.namespace_;
  if (namespace_.empty()) namespace_ = "default";
  if (auto g = Param("stop_grace"); !g.empty()) {
    if (auto s = ParseDurationSeconds(g)) stop_grace_s_ = *s;
  }
}

std::string KubernetesProvider::Param(const std::string& key) const {
  auto it = params_.find(key);
  return it == params_.end() ? "" : std::string(Trim(it->second));
}

std::string KubernetesProvider::Selector(const MachineTag& tag) const {
  return std::string(kLabelInstance) + "=" + LabelValue(tag.instance) + "," + kLabelPool + "=" +
         LabelValue(tag.pool);
}

std::string KubernetesProvider::SecretName(const MachineTag& tag) const {
  return KubeName("trainq-token-" + tag.instance + "-" + tag.pool, 253);
}

Result<KubernetesProvider::Reply> KubernetesProvider::Call(const std::string& method,
                                                           const std::string& path,
                                                           const json* body,
                                                           std::int64_t timeout_ms) const {
  HttpRequest req;
  req.method = method;
  req.url = endpoint_.server + path;
  req.timeout_ms = timeout_ms;
  req.headers = {{"Accept", "application/json"}};
  std::string token = endpoint_.token;
  if (!endpoint_.token_file.empty()) {
    // Re-read at each call: projected service-account tokens rotate.
    auto t = ReadFile(endpoint_.token_file);
    if (!t) {
      return Fail(ErrorKind::kInvalidArgument,
                  "kubernetes: the API token file: " + t.error().message);
    }
    token = std::string(Trim(*t));
  }
  if (!token.empty()) req.headers.emplace_back("Authorization", "Bearer " + token);
  if (body) {
    req.headers.emplace_back("Content-Type", "application/json");
    req.body = body->dump();
  }
  req.ca_file = endpoint_.ca_file;
  req.ca_pem = endpoint_.ca_pem;
  req.client_cert_pem = endpoint_.client_cert_pem;
  req.client_key_pem = endpoint_.client_key_pem;
  auto resp = http_->Send(req);
  if (!resp) return std::unexpected(resp.error().Wrap("kubernetes"));
  Reply r;
  r.status = resp->status;
  r.text = std::move(resp->body);
  r.body = json::parse(r.text, nullptr, false);
  if (r.body.is_discarded()) r.body = json();
  return r;
}

Error KubernetesProvider::ApiError(const Reply& r, const std::string& verb,
                                   const std::string& resource) const {
  std::string message = Str(r.body, "message");
  if (message.empty()) message = std::string(Trim(r.text.substr(0, 300)));
  const std::string what = verb + " " + resource + " in namespace " + namespace_;
  std::string m = "kubernetes: " + what + ": HTTP " + std::to_string(r.status);
  if (auto reason = Str(r.body, "reason"); !reason.empty()) m += " " + reason;
  if (!message.empty()) m += ": " + message;
  ErrorKind kind = ErrorKind::kInvalidArgument;
  if (r.status == 401) {
    m += " (the API server refused the credentials of " + endpoint_.source + ")";
  } else if (r.status == 403 && message.find("exceeded quota") != std::string::npos) {
    kind = ErrorKind::kUnavailable;  // capacity: retried after the back-off
    m += " (the namespace's ResourceQuota is full: retried after a back-off)";
  } else if (r.status == 403) {
    m = "kubernetes: forbidden: " + what + " (the account of " + endpoint_.source +
        " needs a Role granting \"" + verb + "\" on \"" + resource +
        "\"; see docs/pools.md, Kubernetes): " + message;
  } else if (r.status == 429 || r.status >= 500) {
    kind = ErrorKind::kUnavailable;
  }
  return Error{kind, m};
}

json KubernetesProvider::PodFor(const BootSpec& spec) const {
  const std::string token_path = Param("token_file").empty() ? kTokenPath : Param("token_file");
  std::vector<std::string> argv = spec.worker_argv;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--token-file") argv[i + 1] = token_path;
  }
  json labels = json::object();
  json annotations = json::object();
  if (auto m = StringMap("labels", Param("labels"))) {
    for (const auto& [k, v] : *m) labels[k] = v;
  }
  if (auto m = StringMap("annotations", Param("annotations"))) {
    for (const auto& [k, v] : *m) annotations[k] = v;
  }
  labels["app.kubernetes.io/managed-by"] = "trainq";
  labels[kLabelInstance] = LabelValue(spec.tag.instance);
  labels[kLabelPool] = LabelValue(spec.tag.pool);
  labels[kLabelMachine] = LabelValue(spec.name);
  // The exact names, whatever the label values had to become.
  annotations[kLabelPool] = spec.tag.pool;
  annotations[kLabelMachine] = spec.name;

  json requests = json::object();
  if (auto v = Param("cpu"); !v.empty()) requests["cpu"] = v;
  if (auto v = Param("memory"); !v.empty()) requests["memory"] = v;
  if (spec.gpus > 0) {
    std::string gpu = Param("gpu_resource").empty() ? "nvidia.com/gpu" : Param("gpu_resource");
    requests[gpu] = std::to_string(spec.gpus);
  }
  json container = {
      {"name", "worker"},
      {"image", Param("image")},
      {"command", json::array({argv.empty() ? std::string("trainq") : argv.front()})},
      {"args", argv.size() > 1 ? json(std::vector<std::string>(argv.begin() + 1, argv.end()))
                               : json::array()},
      {"env", json::array({{{"name", "TRAINQ_POD_NAME"},
                            {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
                           {{"name", "TRAINQ_POD_IP"},
                            {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}})},
      {"volumeMounts", json::array({{{"name", "trainq-token"},
                                     {"mountPath", Dir(token_path)},
                                     {"readOnly", true}}})},
  };
  if (!requests.empty()) container["resources"] = {{"requests", requests}, {"limits", requests}};
  if (auto v = Param("image_pull_policy"); !v.empty()) container["imagePullPolicy"] = v;
  // An unmasked /proc lets the worker's bwrap mount a fresh /proc for each
  // run (the full sandbox) instead of falling back to the pod's own.
  if (auto v = Param("proc_mount"); !v.empty()) container["securityContext"] = {{"procMount", v}};
  json pod_spec = {
      {"restartPolicy", "Never"},
      {"terminationGracePeriodSeconds", stop_grace_s_},
      {"containers", json::array({container})},
      {"volumes",
       json::array({{{"name", "trainq-token"},
                     {"secret",
                      {{"secretName", SecretName(spec.tag)},
                       {"defaultMode", 0400},
                       {"items", json::array({{{"key", "token"},
                                               {"path", fs::path(token_path).filename().string()}}})}}}}})},
  };
  if (auto sa = Param("service_account"); !sa.empty()) {
    pod_spec["serviceAccountName"] = sa;
  } else {
    // The runs need no API access: no token of the namespace's default account.
    pod_spec["automountServiceAccountToken"] = false;
  }
  if (auto m = StringMap("node_selector", Param("node_selector")); m && !m->empty()) {
    pod_spec["nodeSelector"] = *m;
  }
  if (auto t = Tolerations(Param("tolerations")); t && !t->empty()) pod_spec["tolerations"] = *t;
  if (auto l = StringList("image_pull_secrets", Param("image_pull_secrets")); l && !l->empty()) {
    json secrets = json::array();
    for (const auto& s : *l) secrets.push_back({{"name", s}});
    pod_spec["imagePullSecrets"] = secrets;
  }
  if (auto v = Param("priority_class"); !v.empty()) pod_spec["priorityClassName"] = v;
  // The token's Secret files are root's, mode 0400, and the image's worker is
  // not root (dist/kubernetes/Dockerfile: USER trainq): with an fsGroup the
  // kubelet gives the files to that group (0440) and the worker's process
  // that supplementary group, so the worker reads its token.
  const std::string fs_group = Param("fs_group").empty() ? "2000" : Param("fs_group");
  std::int64_t gid = 0;
  if (std::from_chars(fs_group.data(), fs_group.data() + fs_group.size(), gid).ec == std::errc()) {
    pod_spec["securityContext"] = {{"fsGroup", gid}};
  }
  // false: the pod runs in a user namespace of its own (its root is no user
  // of the node's), in which bwrap can make the run's namespaces.
  if (auto v = Param("host_users"); !v.empty()) pod_spec["hostUsers"] = v == "true";
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", KubeName(spec.name, 63)},
            {"namespace", namespace_},
            {"labels", labels},
            {"annotations", annotations}}},
          {"spec", pod_spec}};
}

Status KubernetesProvider::EnsureSecret(const BootSpec& spec) {
  if (spec.token.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "kubernetes: boot: no pool token to give the worker");
  }
  const std::string name = SecretName(spec.tag);
  const std::string data = Base64Encode(spec.token);
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"type", "Opaque"},
                 {"metadata",
                  {{"name", name},
                   {"namespace", namespace_},
                   {"labels",
                    {{"app.kubernetes.io/managed-by", "trainq"},
                     {kLabelInstance, LabelValue(spec.tag.instance)},
                     {kLabelPool, LabelValue(spec.tag.pool)}}}}},
                 {"data", {{"token", data}}}};
  const std::string base = "/api/v1/namespaces/" + namespace_ + "/secrets";
  ASSIGN_OR_RETURN(auto r, Call("POST", base, &secret));
  if (r.status == 201 || r.status == 200) return {};
  if (r.status != 409) return std::unexpected(ApiError(r, "create", "secrets"));
  // It exists (an earlier boot): replace it when the token changed.
  ASSIGN_OR_RETURN(auto got, Call("GET", base + "/" + name, nullptr));
  if (got.status != 200) return std::unexpected(ApiError(got, "get", "secrets"));
  if (got.body.contains("data") && Str(got.body["data"], "token") == data) return {};
  secret["metadata"]["resourceVersion"] = Str(got.body["metadata"], "resourceVersion");
  ASSIGN_OR_RETURN(auto put, Call("PUT", base + "/" + name, &secret));
  if (put.status != 200) return std::unexpected(ApiError(put, "update", "secrets"));
  return {};
}

Result<std::string> KubernetesProvider::Boot(const BootSpec& spec) {
  if (spec.worker_argv.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "kubernetes: boot: no worker command");
  }
  {
    std::lock_guard lock(mu_);
    tag_ = spec.tag;
  }
  // The Secret stays until the pod that uses it exists (Stop's clean-up).
  std::shared_lock secret(secret_mu_);
  TRY(EnsureSecret(spec));
  json pod = PodFor(spec);
  const std::string name = pod["metadata"]["name"];
  const std::string base = "/api/v1/namespaces/" + namespace_ + "/pods";
  ASSIGN_OR_RETURN(auto r, Call("POST", base, &pod));
  if (r.status == 201 || r.status == 200) return name;
  if (r.status != 409) return std::unexpected(ApiError(r, "create", "pods"));
  // AlreadyExists: a retried Boot (its first answer was lost). Adopt it when
  // it is this pool's.
  ASSIGN_OR_RETURN(auto got, Call("GET", base + "/" + name, nullptr));
  if (got.status != 200) return std::unexpected(ApiError(got, "get", "pods"));
  const json labels = got.body.value("metadata", json::object()).value("labels", json::object());
  if (Str(labels, kLabelInstance) != LabelValue(spec.tag.instance) ||
      Str(labels, kLabelPool) != LabelValue(spec.tag.pool)) {
    return Fail(ErrorKind::kInvalidArgument,
                "kubernetes: a pod named " + name + " already exists in namespace " + namespace_ +
                    " and is not this pool's");
  }
  return name;
}

std::string KubernetesProvider::SchedulingMessage(const std::string& name) const {
  auto r = Call("GET",
                "/api/v1/namespaces/" + namespace_ + "/events?fieldSelector=" +
                    UrlEncode("involvedObject.kind=Pod,involvedObject.name=" + name),
                nullptr);
  if (!r || r->status != 200 || !r->body.contains("items")) return "";
  std::string best, best_at;
  for (const auto& ev : r->body["items"]) {
    if (Str(ev, "reason") != "FailedScheduling") continue;
    std::string at = Str(ev, "lastTimestamp");
    if (at.empty()) at = Str(ev, "eventTime");
    if (best.empty() || at >= best_at) {
      best = Str(ev, "message");
      best_at = at;
    }
  }
  return best;
}

Result<std::vector<ListedMachine>> KubernetesProvider::List(const MachineTag& tag) {
  {
    std::lock_guard lock(mu_);
    tag_ = tag;
  }
  std::vector<ListedMachine> out;
  std::string cont;
  for (int page = 0; page < 100; ++page) {
    std::string path = "/api/v1/namespaces/" + namespace_ +
                       "/pods?limit=500&labelSelector=" + UrlEncode(Selector(tag));
    if (!cont.empty()) path += "&continue=" + UrlEncode(cont);
    ASSIGN_OR_RETURN(auto r, Call("GET", path, nullptr));
    if (r.status != 200) return std::unexpected(ApiError(r, "list", "pods"));
    for (const auto& pod : r.body.value("items", json::array())) {
      const json meta = pod.value("metadata", json::object());
      const json status = pod.value("status", json::object());
      const json annotations = meta.value("annotations", json::object());
      if (auto p = Str(annotations, kLabelPool); !p.empty() && p != tag.pool) continue;
      ListedMachine m;
      m.id = Str(meta, "name");
      m.tag = tag;
      m.name = Str(annotations, kLabelMachine);
      if (m.name.empty()) m.name = m.id;
      const std::string phase = Str(status, "phase");
      std::string disruption;
      bool unschedulable = false;
      std::string scheduling;
      for (const auto& c : status.value("conditions", json::array())) {
        if (Str(c, "type") == "DisruptionTarget" && Str(c, "status") == "True") {
          disruption = Str(c, "reason");
          if (auto msg = Str(c, "message"); !msg.empty()) disruption += ": " + msg;
        }
        if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False" &&
            Str(c, "reason") == "Unschedulable") {
          unschedulable = true;
          scheduling = Str(c, "message");
        }
      }
      std::string waiting, waiting_message;
      int exit_code = -1;
      std::string terminated;
      for (const auto& cs : status.value("containerStatuses", json::array())) {
        const json state = cs.value("state", json::object());
        if (state.contains("waiting")) {
          waiting = Str(state["waiting"], "reason");
          waiting_message = Str(state["waiting"], "message");
        }
        if (state.contains("terminated")) {
          exit_code = state["terminated"].value("exitCode", -1);
          terminated = Str(state["terminated"], "reason");
        }
      }
      const bool deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
      if (deleting && Deleting(m.id)) continue;  // stopped by trainq: on its way out
      if (!disruption.empty()) {
        m.ended = "disrupted by the cluster (DisruptionTarget: " + disruption + ")";
        m.disrupted = true;
      } else if (Str(status, "reason") == "Evicted") {
        m.ended = "evicted: " + Str(status, "message");
        m.disrupted = true;
      } else if (deleting) {
        m.ended = "its pod was deleted by someone else";
        m.disrupted = true;
      } else if (phase == "Succeeded" || phase == "Failed") {
        m.ended = "its worker exited (pod " + phase;
        if (exit_code >= 0) m.ended += ", exit code " + std::to_string(exit_code);
        if (!terminated.empty()) m.ended += ", " + terminated;
        if (auto msg = Str(status, "message"); !msg.empty()) m.ended += ": " + msg;
        m.ended += ")";
      } else if (FatalWaiting(waiting)) {
        m.ended = "its container cannot start: " + waiting +
                  (waiting_message.empty() ? "" : ": " + waiting_message);
      } else if (unschedulable) {
        std::string msg = SchedulingMessage(m.id);
        if (msg.empty()) msg = scheduling;
        m.note = "waiting for a node (FailedScheduling): " + msg;
      } else if (phase == "Pending" && !waiting.empty()) {
        m.note = waiting + (waiting_message.empty() ? "" : ": " + waiting_message);
      }
      out.push_back(std::move(m));
    }
    cont = r.body.value("metadata", json::object()).value("continue", std::string());
    if (cont.empty()) return out;
  }
  return Fail(ErrorKind::kInternal, "kubernetes: list pods: more than 100 pages");
}

Status KubernetesProvider::Stop(const std::string& id) {
  if (id.empty()) return Fail(ErrorKind::kInvalidArgument, "kubernetes: stop: empty pod name");
  json options = {{"apiVersion", "v1"},
                  {"kind", "DeleteOptions"},
                  {"gracePeriodSeconds", stop_grace_s_},
                  {"propagationPolicy", "Background"}};
  ASSIGN_OR_RETURN(auto r,
                   Call("DELETE", "/api/v1/namespaces/" + namespace_ + "/pods/" + id, &options));
  if (r.status != 200 && r.status != 202 && r.status != 404) {
    return std::unexpected(ApiError(r, "delete", "pods"));
  }
  std::optional<MachineTag> tag;
  {
    std::lock_guard lock(mu_);
    deleting_.insert(id);
    // The pool the pod was of (the DELETE answers with the pod), else the
    // pool of the last Boot or List.
    tag = tag_;
  }
  if (r.status != 404 && r.body.is_object()) {
    const json meta = r.body.value("metadata", json::object());
    const json labels = meta.value("labels", json::object());
    MachineTag t{Str(meta.value("annotations", json::object()), kLabelPool),
                 Str(labels, kLabelInstance)};
    if (t.pool.empty()) t.pool = Str(labels, kLabelPool);
    if (!t.pool.empty() && !t.instance.empty()) tag = t;
  }
  if (!tag) return {};
  return DeleteSecretIfUnused(*tag);
}

bool KubernetesProvider::Deleting(const std::string& pod) {
  std::lock_guard lock(mu_);
  return deleting_.count(pod) > 0;
}

Status KubernetesProvider::DeleteSecretIfUnused(const MachineTag& tag) {
  // A boot between its Secret and its pod: the Secret is in use; a later
  // Stop cleans up.
  std::unique_lock secret(secret_mu_, std::try_to_lock);
  if (!secret.owns_lock()) return {};
  ASSIGN_OR_RETURN(auto r, Call("GET",
                                "/api/v1/namespaces/" + namespace_ +
                                    "/pods?labelSelector=" + UrlEncode(Selector(tag)),
                                nullptr));
  if (r.status != 200) return std::unexpected(ApiError(r, "list", "pods"));
  for (const auto& pod : r.body.value("items", json::array())) {
    const json meta = pod.value("metadata", json::object());
    if (!meta.contains("deletionTimestamp") || meta["deletionTimestamp"].is_null()) return {};
  }
  json options = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  ASSIGN_OR_RETURN(auto d, Call("DELETE",
                                "/api/v1/namespaces/" + namespace_ + "/secrets/" + SecretName(tag),
                                &options));
  if (d.status != 200 && d.status != 202 && d.status != 404) {
    return std::unexpected(ApiError(d, "delete", "secrets"));
  }
  return {};
}

Result<std::string> KubernetesProvider::LogTail(const std::string& id, const std::string&,
                                                std::size_t max_bytes) {
  if (id.empty()) return Fail(ErrorKind::kNotFound, "kubernetes: no pod name");
  ASSIGN_OR_RETURN(auto r, Call("GET",
                                "/api/v1/namespaces/" + namespace_ + "/pods/" + id +
                                    "/log?tailLines=200&limitBytes=" + std::to_string(max_bytes),
                                nullptr));
  // 400: the container never started (nothing to show); 404: the pod is gone.
  if (r.status == 404 || r.status == 400) {
    return Fail(ErrorKind::kNotFound, "kubernetes: no log for pod " + id);
  }
  if (r.status != 200) return std::unexpected(ApiError(r, "get", "pods/log"));
  return TailBytes(r.text, max_bytes);
}

}  // namespace trainq::cloud
