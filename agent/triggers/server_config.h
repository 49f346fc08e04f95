// The `trainq serve --config FILE` file (YAML): which repositories are
// watched, how their webhooks are authenticated, how often they are polled and
// whether commit statuses go back to the forge.
//
//   listen: 127.0.0.1:8080          # optional; --listen wins
//   repositories:
//     - url: https://github.com/acme/model.git
//       forge: github               # github | gitlab | gitea | none (poll only)
//       branches: [main, "release/*"]
//       secret: {env: TRAINQ_WEBHOOK_SECRET}   # or {file: /etc/trainq/secret}
//       token: {file: /etc/trainq/github-token}
//       status: true
//       poll_interval: 5m
//       catch_up: 5m                # without poll_interval: fetch at start and this often,
//                                   # process a watched head no webhook brought (off: never)
//       pull_requests: true         # same-repository pull/merge requests run (default)
//       fork_pull_requests: false   # heads from forks run only when true: untrusted code
//       pr_comments: true           # one comment per pull request (default: = status)
//       report_url: https://ci.example/trainq/report.html   # linked from the comment
//       webhook_rate_limit: 60      # deliveries a minute kept; more answer 429 (0: no limit)
//       coalesce: branches          # a newer push cancels the older one's queued runs:
//                                   # branches (not the default branch) | all | off
//   read_token: {env: TRAINQ_READ_TOKEN}   # GET /api/v1/{status,report,gate,logs}, /metrics
//   admin_token: {file: /etc/trainq/admin-token}   # the dashboard's actions
//   public_url: https://trainq.example   # where people reach serve: commit statuses
//                                        # link to the dashboard's commit page
//   retention: {metric_points: 90d, logs: 30d, audit: 400d}   # finished runs' points
//                                 # compacted, logs gzipped, audit rows deleted
//                                 # (queue/retention.h); default: kept
//   notify: [...]                 # chat and webhook notifications (agent/triggers/notify_config.h)
//   mlflow: {...}                 # export to an MLflow tracking server
//   (agent/triggers/mlflow_config.h)
//
// Secrets and tokens are read from an environment variable or a file, never
// written in the config itself, and never logged. Every error names the file,
// the line and the key: `server.yaml:7: repositories[0].secret.env: ...`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/triggers/forge.h"
#include "agent/triggers/mlflow_config.h"
#include "agent/triggers/notify_config.h"
#include "cloud/autoscaler.h"
#include "agent/repo/manifest_check.h"
#include "core/result.h"
#include "core/yaml_reader.h"  // SecretValue
#include "queue/retention.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace trainq {

struct RepoConfig {
  std::string url;                    // what is fetched; also the webhook payload's identity
  ForgeKind forge = ForgeKind::kNone;
  std::string project;                // owner/name for the status API (default: from url)
  std::vector<std::string> branches;  // globs over branch names; default: all ("**")
  std::string default_branch;         // "" = the remote's HEAD
  SecretValue secret;                 // webhook secret (GitLab: the token)
  SecretValue token;                  // https fetch and the status API
  std::string username;               // https user that goes with the token
  std::string ssh_key;                // private key file for ssh urls ("" = ssh-agent)
  std::string api_url;                // forge API base (default per forge)
  bool status = false;                // report commit statuses
  std::string status_context = "trainq";  // statuses are "<context>/<experiment>"
  std::int64_t poll_interval_s = 0;   // 0: no polling
  // Without polling, a repository with a forge is fetched at start and this
  // often, and a watched head that moved with no webhook recorded is
  // processed (poller.h, "catch-up"); 0: never.
  std::int64_t catch_up_s = 300;
  bool per_commit = false;            // every pushed commit gets batches, not only the head
  bool tags = false;                  // tag pushes queue runs too
  // When a finished batch's commit status is `failure` beyond failed runs:
  // "worse" (significantly worse than its baseline), "not_better" (anything
  // but significantly better), "never".
  std::string fail_on = "worse";
  SubmitLimits limits;                // `limits: {experiments: N, runs: N}` per push
  bool pull_requests = true;          // pull/merge requests from this repository run
  bool fork_pull_requests = false;    // ... and from forks (untrusted code on your machines)
  bool pr_comments = false;           // the verdict as one comment per pull request
  int webhook_rate_limit = 60;        // deliveries a minute (a minute's burst); 0: no limit
  // A newer push to a ref cancels the queued runs of the heads it superseded:
  // on every ref but the default branch (branches), on all of them, or never.
  enum class Coalesce { kBranches, kAll, kOff } coalesce = Coalesce::kBranches;
  std::string report_url;             // linked from the comment; "" = no link
  // `mlflow:` for this repository's batches, in place of the global one
  // (docs/mlflow.md); `mlflow: off` exports none of them. Empty: the global.
  std::optional<MlflowConfig> mlflow;
  int line = 0;                       // where the entry starts in the file

  // Whether a push to `ref` concerns this repository's watch list.
  bool Watches(std::string_view ref) const;
};

// A pool of machines that one provider boots (`pools:` in the server config).
//   pools:
//     - name: gpu
//       provider: slurm            # local (default) | slurm | ec2 | command
//       min: 0
//       max: 4
//       slots: 2                   # runs per machine at once
//       gpus: 1                    # GPUs per machine
//       runs_per_gpu: 1
//       fuse_max: 10               # seeds of a trainer: experiment fused into one trainq-train
//       idle_grace: 2m
//       boot_timeout: 10m          # no worker registered by then: the machine is lost
//       lost_after: 45s            # a registered worker silent this long: lost (0 = never)
//       orphan_timeout: 10m        # worker's dead-man switch
//       self_stop: "sudo shutdown -h now"   # what a worker runs on its dead-man switch
//       env_passthrough: [WANDB_API_KEY, "CONDA_*"]  # the worker's variables runs also get
//       hourly_cost: 2.5
//       token: {file: /etc/trainq/gpu.token}  # optional; default: generated under <data>/tokens/
//       params: {partition: gpu, gres: "gpu:1", time: "4:00:00"}   # provider parameters
//       allow_loopback: false      # slurm/ec2/command: accept a loopback server URL (a test
//                                  # on this host); see CheckWorkerUrls
//       failing_after: 3           # failed boots in a row before the pool is failing
//       min_bill: 1m               # the least one boot is billed (budgets)
//       budget: {per_day: 50, per_month: 800, drain_at_cap: false}
//       list_interval: 15s         # provider List() pacing while machines change
//       list_interval_idle: 2m     # ... and while nothing changes
// The top level takes `budget:` too: all pools together.
// Without `pools:` there is one pool, "local": the local provider, max 1
// machine with `--slots` slots.
struct PoolSpec {
  cloud::PoolConfig scaling;  // name, min, max, slots, idle_grace, boot_timeout, hourly_cost
  std::string provider = "local";
  int gpus = 0;
  int runs_per_gpu = 1;
  int fuse_max = 1;  // the worker's --fuse-max
  std::int64_t orphan_timeout_ms = 10 * 60'000;
  std::string self_stop;
  // Variables runs get from their worker's environment beside the safe base
  // (RunEnvironment); a local pool's workers get them from serve's.
  std::vector<std::string> env_passthrough;
  // The worker's --sandbox (agent/runner/sandbox.h): auto | bwrap | none, and
  // the directories runs may write besides their checkout and run directory.
  std::string sandbox = "auto";
  std::vector<std::string> sandbox_writable;
  SecretValue token;  // empty: serve generates one (<data>/tokens/<pool>.token, mode 0600)
  std::map<std::string, std::string> params;
  bool allow_loopback = false;
  int line = 0;
  std::map<std::string, int> param_lines;  // params key -> its line, for messages
  const std::string& name() const { return scaling.name; }
  // Machines elsewhere (slurm, ec2, kubernetes, command): their workers need
  // a server URL that is not this host's loopback.
  bool remote() const {
    return provider == "slurm" || provider == "ec2" || provider == "command" ||
           provider == "kubernetes";
  }
};

// An address range, "10.0.0.0/8" or "::1/128" (a bare address is /32 or /128).
struct Cidr {
  int family = 0;  // AF_INET or AF_INET6
  unsigned char bytes[16] = {};
  int prefix = 0;
};
std::optional<Cidr> ParseCidr(std::string_view text);
// Whether the numeric address `address` ("127.0.0.1") is in `cidr`.
bool CidrContains(const Cidr& cidr, std::string_view address);

// `auth:` (issue 41): who people are besides their personal tokens.
//   auth:
//     trusted_header: {user: X-Auth-Request-Email, groups: X-Auth-Request-Groups,
//                      from: [127.0.0.1/32]}      # behind oauth2-proxy and the like
//     admins: [ml-platform, ada@example.com]      # groups or emails
//     writers: [ml-team]
//     viewers: [ml-readers]                       # absent: every user the proxy lets in reads
//     github: {client_id: Iv1.abc, client_secret: {file: /etc/trainq/github-oauth-secret},
//              web_url: https://github.com, api_url: https://api.github.com}
//                                                 # "Sign in with GitHub" (roles from the
//                                                 # person's access to each watched repository)
//     gitlab: {client_id, client_secret, web_url: https://gitlab.com, api_url: WEB/api/v4}
//     gitea:  {client_id, client_secret, web_url: https://gitea.example}   # api_url: WEB/api/v1
//     oidc: {issuer: https://id.example.com, client_id: trainq,
//            client_secret: {file: /etc/trainq/oidc-secret}, scopes: [openid, email, profile],
//            admins: [ml-platform], writers: [...], viewers: [...]}
//                                                 # "Sign in with OIDC" (discovery, code flow
//                                                 # with PKCE and nonce, the ID token verified
//                                                 # against the issuer's JWKS); roles from its own
//                                                 # lists, else from auth's admins/writers/viewers
// Who gets which role by name or group (the trusted header, OIDC).
struct RoleLists {
  std::vector<std::string> admins, writers, viewers;  // emails/user names or groups
  bool viewers_given = false;  // absent: everyone the door lets in reads
};

struct OidcAuthConfig {
  std::string issuer;      // "" = no OIDC door; exactly the ID tokens' `iss`
  std::string client_id;   // the ID tokens' `aud`
  SecretValue client_secret;  // never logged
  std::vector<std::string> scopes = {"openid", "email", "profile"};
  std::string label = "OIDC";  // the button: "Sign in with LABEL"
  RoleLists roles;
  bool roles_given = false;  // false: auth's own admins/writers/viewers apply
  bool enabled() const { return !issuer.empty(); }
};

// A forge's sign-in door (auth.github, auth.gitlab, auth.gitea): an OAuth app
// registered at the forge, and where its pages and API are.
struct ForgeAuthConfig {
  ForgeKind kind = ForgeKind::kNone;
  std::string client_id;       // "" = no door for this forge
  SecretValue client_secret;   // never logged
  std::string web_url;  // authorize and token pages: https://github.com, https://gitlab.com
  std::string api_url;  // the user and the repositories: https://api.github.com,
                        // WEB/api/v4 (GitLab), WEB/api/v1 (Gitea)
  bool enabled() const { return !client_id.empty(); }
};

struct AuthConfig : RoleLists {
  ForgeAuthConfig github{ForgeKind::kGithub, "", {}, "https://github.com", "https://api.github.com"};
  ForgeAuthConfig gitlab{ForgeKind::kGitlab, "", {}, "https://gitlab.com", "https://gitlab.com/api/v4"};
  ForgeAuthConfig gitea{ForgeKind::kGitea, "", {}, "", ""};  // web_url required
  OidcAuthConfig oidc;
  std::string user_header;    // "" = no trusted header
  std::string groups_header;  // "" = none (roles by email only)
  std::vector<Cidr> from;     // the proxy's addresses: the header is honoured from these only
  std::vector<std::string> from_text;
  bool trusted_header() const { return !user_header.empty(); }
};

struct ServerConfig {
  std::string path;    // the file, for messages
  std::string listen;  // "" = not set
  std::vector<RepoConfig> repositories;
  std::vector<PoolSpec> pools;  // empty: the default local pool
  // The bearer token of the read routes (GET /api/v1/report, /api/v1/gate):
  // separate from worker tokens and webhook secrets, so a CI job that reads
  // reports can neither lease runs nor forge a push. Empty: those routes
  // answer 403.
  SecretValue read_token;
  SecretValue admin_token;  // the dashboard's actions (agent/daemon/dashboard.h)
  // Where people reach serve's dashboard ("https://trainq.example", no
  // trailing '/'); "" = not set. Commit statuses carry target_url
  // PUBLIC_URL/commit/SHA when set.
  std::string public_url;
  cloud::OverallBudget budget;  // `budget:` at the top level (spend is filled by the fleet)
  RetentionPolicy retention;    // `retention:`; default: everything kept
  AuthConfig auth;              // `auth:`; default: tokens only
  std::vector<NotifyTarget> notify;  // `notify:` (agent/triggers/notify_config.h)
  MlflowConfig mlflow;               // `mlflow:` (agent/triggers/mlflow_config.h)
  // Every file the config names, absolute: each `{file: ...}` anywhere, and
  // each value of a key named kubeconfig or ending in _file or _key
  // (ssh_key, credentials_file, api_token_file, token_file, ...) but ca_file
  // (public), wherever it sits. Found by one walk of the parsed document
  // (ConfigNamedPaths), so a key added later is covered: what runs on this
  // host must never see (serve's SandboxHidden).
  std::vector<std::string> named_paths;

  const PoolSpec* FindPool(std::string_view name) const {
    for (const auto& p : pools)
      if (p.name() == name) return &p;
    return nullptr;
  }

  // The repository whose url matches `url` (normalised), if any.
  const RepoConfig* FindRepo(std::string_view url) const;
  // Where `repo`'s batches are exported: its own `mlflow:` or else the
  // global one (tracking_uri "" = not exported).
  const MlflowConfig& MlflowFor(const RepoConfig* repo) const {
    return repo && repo->mlflow ? *repo->mlflow : mlflow;
  }
  // Whether any batch is exported (the global `mlflow:` or a repository's).
  bool MlflowAny() const {
    if (mlflow.enabled()) return true;
    for (const auto& r : repositories)
      if (r.mlflow && r.mlflow->enabled()) return true;
    return false;
  }
};

// Parses `text`; `filename` is used in messages. Reads the secrets it names
// from the environment and files.
Result<ServerConfig> ParseServerConfig(std::string_view text, std::string_view filename);

// The walk behind ServerConfig::named_paths, over any YAML document.
std::vector<std::string> ConfigNamedPaths(const YAML::Node& root);
Result<ServerConfig> LoadServerConfig(const std::string& path);

// The server URL the workers of `pool` are given: params.server_url, else
// `default_url` (what serve derives from its listen address).
std::string PoolServerUrl(const PoolSpec& pool, const std::string& default_url);

// At start: every remote pool's workers must get a server URL that a machine
// elsewhere can reach. A loopback or unspecified host (127.0.0.1, localhost,
// ::1, 0.0.0.0, ::) is refused, naming file:line:key and what to set, unless
// the pool says `allow_loopback: true`. `listen` is serve's listen address,
// for the message.
Status CheckWorkerUrls(const ServerConfig& config, const std::string& default_url,
                       const std::string& listen);

}  // namespace trainq
