#include "agent/triggers/notify_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "agent/repo/change_detect.h"  // GlobMatch
#include "agent/triggers/forge.h"
#include "core/http_client.h"

namespace trainq {

bool NotifyTarget::Wants(std::string_view event) const {
  return std::find(on.begin(), on.end(), event) != on.end();
}

namespace {

bool AnyGlob(const std::vector<std::string>& globs, std::string_view value) {
  if (globs.empty()) return true;
  if (value.empty()) return false;
  for (const auto& g : globs) {
    if (GlobMatch(g, value)) return true;
  }
  return false;
}

}  // namespace

bool NotifyTarget::Matches(std::string_view project, std::string_view repo_url,
                           std::string_view branch, std::string_view experiment) const {
  if (!repositories.empty()) {
    bool hit = false;
    for (const auto& r : repositories) {
      if ((!project.empty() && r == project) ||
          (!repo_url.empty() && NormaliseRepoUrl(r) == NormaliseRepoUrl(repo_url))) {
        hit = true;
      }
    }
    if (!hit) return false;
  }
  return AnyGlob(branches, branch) && AnyGlob(experiments, experiment);
}

namespace {

// An http(s) URL with a host.
Status CheckUrl(const YamlReader& r, const YAML::Node& at, const std::string& path,
                const std::string& url, bool secret) {
  const std::string shown = secret ? "the URL read from it" : "\"" + url + "\"";
  if (!url.starts_with("https://") && !url.starts_with("http://")) {
    return r.Err(at, path, "expected an http:// or https:// URL, got " + shown);
  }
  if (auto host = UrlHost(url); !host || host->empty()) {
    return r.Err(at, path, "expected a URL with a host, got " + shown);
  }
  return {};
}

Result<NotifyTarget> ParseTarget(const YamlReader& r, const YAML::Node& n,
                                 const std::string& path) {
  if (!n.IsMap()) return r.Err(n, path, "expected a mapping, got " + YamlReader::Show(n));
  TRY(r.CheckKeys(n, path, {"name", "slack", "webhook", "on", "repositories", "branches",
                            "experiments", "rate_limit"}));
  NotifyTarget t;
  t.line = n.Mark().line + 1;
  if (!n["name"]) return r.Err(n, path + ".name", "missing (the target's name)");
  ASSIGN_OR_RETURN(t.name, r.NonEmptyStr(n["name"], path + ".name"));
  for (char c : t.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return r.Err(n["name"], path + ".name",
                   "expected letters, digits, '-', '_' or '.', got \"" + t.name + "\"");
    }
  }
  const bool slack = static_cast<bool>(n["slack"]), hook = static_cast<bool>(n["webhook"]);
  if (slack == hook) {
    return r.Err(n, path, "expected exactly one of `slack:` and `webhook:`");
  }
  if (slack) {
    const std::string sp = path + ".slack";
    const YAML::Node& s = n["slack"];
    if (!s.IsMap()) return r.Err(s, sp, "expected {webhook_url: {file: PATH}}, got " +
                                            YamlReader::Show(s));
    TRY(r.CheckKeys(s, sp, {"webhook_url"}));
    if (!s["webhook_url"]) return r.Err(s, sp + ".webhook_url", "missing (Slack's incoming-webhook URL)");
    t.kind = NotifyTarget::Kind::kSlack;
    ASSIGN_OR_RETURN(t.slack_url, r.Secret(s["webhook_url"], sp + ".webhook_url"));
    TRY(CheckUrl(r, s["webhook_url"], sp + ".webhook_url", t.slack_url.value, /*secret=*/true));
  } else {
    const std::string wp = path + ".webhook";
    const YAML::Node& w = n["webhook"];
    if (!w.IsMap()) return r.Err(w, wp, "expected {url: URL, secret: {file: PATH}}, got " +
                                            YamlReader::Show(w));
    TRY(r.CheckKeys(w, wp, {"url", "secret"}));
    if (!w["url"]) return r.Err(w, wp + ".url", "missing (where the JSON is posted)");
    ASSIGN_OR_RETURN(t.url, r.NonEmptyStr(w["url"], wp + ".url"));
    TRY(CheckUrl(r, w["url"], wp + ".url", t.url, /*secret=*/false));
    if (!w["secret"]) {
      return r.Err(w, wp + ".secret",
                   "missing (the key of the X-Trainq-Signature-256 HMAC, {file: PATH} or "
                   "{env: NAME}): a receiver must be able to tell trainq's messages from others");
    }
    ASSIGN_OR_RETURN(t.secret, r.Secret(w["secret"], wp + ".secret"));
  }
  if (!n["on"]) {
    return r.Err(n, path + ".on", "missing (the events to send: worse, drift, not_reproducible, "
                                  "dead_runs, pool_failing, budget, queue_stuck)");
  }
  ASSIGN_OR_RETURN(t.on, r.StrList(n["on"], path + ".on"));
  for (const auto& e : t.on) {
    if (std::find(std::begin(kNotifyEvents), std::end(kNotifyEvents), e) ==
        std::end(kNotifyEvents)) {
      return r.Err(n["on"], path + ".on",
                   "unknown event \"" + e + "\" (expected worse, drift, not_reproducible, "
                   "dead_runs, pool_failing, budget or queue_stuck)");
    }
  }
  if (auto v = n["repositories"]) {
    ASSIGN_OR_RETURN(t.repositories, r.StrList(v, path + ".repositories"));
  }
  if (auto v = n["branches"]) { ASSIGN_OR_RETURN(t.branches, r.StrList(v, path + ".branches")); }
  if (auto v = n["experiments"]) {
    ASSIGN_OR_RETURN(t.experiments, r.StrList(v, path + ".experiments"));
  }
  if (auto v = n["rate_limit"]) {
    ASSIGN_OR_RETURN(auto limit, r.Int(v, path + ".rate_limit", 1));
    t.rate_limit = static_cast<int>(std::min<std::int64_t>(limit, 10'000));
  }
  return t;
}

}  // namespace

Result<std::vector<NotifyTarget>> ParseNotifyTargets(const YamlReader& r, const YAML::Node& n,
                                                     const std::string& path) {
  if (!n.IsSequence()) return r.Err(n, path, "expected a list, got " + YamlReader::Show(n));
  std::vector<NotifyTarget> out;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(auto t, ParseTarget(r, n[i], p));
    for (const auto& o : out) {
      if (o.name == t.name) return r.Err(n[i]["name"], p + ".name", "\"" + t.name + "\" is listed twice");
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace trainq
