#include "agent/triggers/forge.h"


#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/crypto.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

namespace {

std::string Header(const HttpHeaders& headers, std::string_view name) {
  return FindHeader(headers, name).value_or("");
}

// A string member, or "" (null, missing or another type).
std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsSha(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c));
         });
}

void AddUrl(std::vector<std::string>& urls, const std::string& u) {
  if (!u.empty() && std::find(urls.begin(), urls.end(), u) == urls.end()) urls.push_back(u);
}

}  // namespace

std::string_view ForgeName(ForgeKind kind) {
  switch (kind) {
    case ForgeKind::kGithub: return "github";
    case ForgeKind::kGitlab: return "gitlab";
    case ForgeKind::kGitea: return "gitea";
    case ForgeKind::kNone: return "none";
  }
  return "none";
}

std::optional<ForgeKind> ParseForgeKind(std::string_view name) {
  for (auto k : {ForgeKind::kGithub, ForgeKind::kGitlab, ForgeKind::kGitea, ForgeKind::kNone}) {
    if (ForgeName(k) == name) return k;
  }
  return std::nullopt;
}

bool IsZeroSha(std::string_view sha) {
  return !sha.empty() && std::all_of(sha.begin(), sha.end(), [](char c) { return c == '0'; });
}

std::string WebhookEvent(ForgeKind forge, const HttpHeaders& headers) {
  switch (forge) {
    case ForgeKind::kGithub: return Header(headers, "X-GitHub-Event");
    case ForgeKind::kGitlab: return Header(headers, "X-Gitlab-Event");
    case ForgeKind::kGitea: return Header(headers, "X-Gitea-Event");
    case ForgeKind::kNone: return "";
  }
  return "";
}

bool IsPushEvent(ForgeKind forge, std::string_view event) {
  switch (forge) {
    case ForgeKind::kGithub:
    case ForgeKind::kGitea: return event == "push";
    case ForgeKind::kGitlab: return event == "Push Hook" || event == "Tag Push Hook";
    case ForgeKind::kNone: return false;
  }
  return false;
}

bool IsPullRequestEvent(ForgeKind forge, std::string_view event) {
  switch (forge) {
    case ForgeKind::kGithub: return event == "pull_request";
    // Gitea names every pull request event `pull_request` in X-Gitea-Event;
    // its X-Gitea-Event-Type (and some versions' X-Gitea-Event) says
    // `pull_request_sync` for new commits.
    case ForgeKind::kGitea: return event == "pull_request" || event == "pull_request_sync";
    case ForgeKind::kGitlab: return event == "Merge Request Hook";
    case ForgeKind::kNone: return false;
  }
  return false;
}

bool IsPingEvent(ForgeKind forge, std::string_view event) {
  return forge == ForgeKind::kGithub && event == "ping";
}

std::string WebhookDeliveryId(ForgeKind forge, const HttpHeaders& headers, std::string_view body) {
  std::string id;
  switch (forge) {
    case ForgeKind::kGithub: id = Header(headers, "X-GitHub-Delivery"); break;
    case ForgeKind::kGitea: id = Header(headers, "X-Gitea-Delivery"); break;
    case ForgeKind::kGitlab:
      id = Header(headers, "Idempotency-Key");
      if (id.empty()) id = Header(headers, "X-Gitlab-Event-UUID");
      break;
    case ForgeKind::kNone: break;
  }
  if (id.size() > 200) id = "sha256:" + Sha256Hex(id);
  if (id.empty()) id = "sha256:" + Sha256Hex(body);
  return id;
}

bool VerifyWebhook(ForgeKind forge, const HttpHeaders& headers, std::string_view body,
                   std::string_view secret) {
  if (secret.empty()) return false;
  switch (forge) {
    case ForgeKind::kGithub: {
      std::string sig = Lower(Header(headers, "X-Hub-Signature-256"));
      if (!sig.starts_with("sha256=")) return false;
      return ConstantTimeEquals(sig.substr(7), HmacSha256Hex(secret, body));
    }
    case ForgeKind::kGitea: {
      std::string sig = Lower(Header(headers, "X-Gitea-Signature"));
      if (sig.empty()) return false;
      return ConstantTimeEquals(sig, HmacSha256Hex(secret, body));
    }
    case ForgeKind::kGitlab: {
      auto token = FindHeader(headers, "X-Gitlab-Token");
      if (!token) return false;
      return ConstantTimeEquals(*token, secret);
    }
    case ForgeKind::kNone: return false;
  }
  return false;
}

WebhookPrecheck PrecheckWebhook(ForgeKind forge, const HttpHeaders& headers,
                                std::string_view secret) {
  if (secret.empty()) return WebhookPrecheck::kRefused;
  auto hex64 = [](std::string_view s) {
    return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
             return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
  };
  switch (forge) {
    case ForgeKind::kGithub: {
      std::string sig = Lower(Header(headers, "X-Hub-Signature-256"));
      return sig.starts_with("sha256=") && hex64(std::string_view(sig).substr(7))
                 ? WebhookPrecheck::kNeedsBody
                 : WebhookPrecheck::kRefused;
    }
    case ForgeKind::kGitea:
      return hex64(Lower(Header(headers, "X-Gitea-Signature"))) ? WebhookPrecheck::kNeedsBody
                                                                : WebhookPrecheck::kRefused;
    case ForgeKind::kGitlab:
      return VerifyWebhook(forge, headers, "", secret) ? WebhookPrecheck::kVerified
                                                       : WebhookPrecheck::kRefused;
    case ForgeKind::kNone: return WebhookPrecheck::kRefused;
  }
  return WebhookPrecheck::kRefused;
}

std::string PushEvent::branch() const {
  return is_branch() ? ref.substr(std::string_view("refs/heads/").size()) : "";
}

Result<PushEvent> ParsePushEvent(ForgeKind forge, std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(ErrorKind::kInvalidArgument, "body is not valid JSON");
  if (!j.is_object()) return Fail(ErrorKind::kInvalidArgument, "body is not a JSON object");
  PushEvent e;
  e.ref = Str(j, "ref");
  e.before = Lower(Str(j, "before"));
  e.after = Lower(Str(j, "after"));
  if (e.ref.empty()) return Fail(ErrorKind::kInvalidArgument, "push payload has no \"ref\"");
  if (!IsSha(e.before)) {
    return Fail(ErrorKind::kInvalidArgument, "push payload: \"before\" is not a commit id");
  }
  if (!IsSha(e.after)) {
    return Fail(ErrorKind::kInvalidArgument, "push payload: \"after\" is not a commit id");
  }
  if (auto c = j.find("commits"); c != j.end() && c->is_array()) {
    for (const auto& commit : *c) {
      std::string id = Lower(Str(commit, "id"));
      if (IsSha(id)) e.commits.push_back(id);
    }
  }
  if (forge == ForgeKind::kGitlab) {
    const json& project = j.contains("project") ? j["project"] : json::object();
    const json& repo = j.contains("repository") ? j["repository"] : json::object();
    for (const char* k : {"git_http_url", "git_ssh_url", "web_url", "http_url", "ssh_url", "url"}) {
      AddUrl(e.repo_urls, Str(project, k));
    }
    for (const char* k : {"git_http_url", "git_ssh_url", "homepage", "url"}) {
      AddUrl(e.repo_urls, Str(repo, k));
    }
    e.full_name = Str(project, "path_with_namespace");
    e.default_branch = Str(project, "default_branch");
  } else {
    const json& repo = j.contains("repository") ? j["repository"] : json::object();
    for (const char* k : {"clone_url", "ssh_url", "git_url", "html_url", "url"}) {
      AddUrl(e.repo_urls, Str(repo, k));
    }
    e.full_name = Str(repo, "full_name");
    e.default_branch = Str(repo, "default_branch");
  }
  if (e.repo_urls.empty() && e.full_name.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "push payload does not name its repository");
  }
  return e;
}

namespace {

const json& Member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::optional<std::int64_t> Int(const json& j) {
  if (j.is_number_integer()) return j.get<std::int64_t>();
  return std::nullopt;
}

}  // namespace

std::string PullRequestEvent::HeadRef(ForgeKind forge) const {
  std::string n = std::to_string(number);
  return forge == ForgeKind::kGitlab ? "refs/merge-requests/" + n + "/head"
                                     : "refs/pull/" + n + "/head";
}

Result<PullRequestEvent> ParsePullRequestEvent(ForgeKind forge, std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(ErrorKind::kInvalidArgument, "body is not valid JSON");
  if (!j.is_object()) return Fail(ErrorKind::kInvalidArgument, "body is not a JSON object");
  PullRequestEvent e;
  const char* what = forge == ForgeKind::kGitlab ? "merge request payload" : "pull request payload";
  if (forge == ForgeKind::kGitlab) {
    const json& oa = Member(j, "object_attributes");
    if (!oa.is_object()) {
      return Fail(ErrorKind::kInvalidArgument, "merge request payload has no \"object_attributes\"");
    }
    e.action = Str(oa, "action");
    e.number = Int(Member(oa, "iid")).value_or(0);
    e.head_sha = Lower(Str(Member(oa, "last_commit"), "id"));
    e.head_ref = Str(oa, "source_branch");
    e.target_branch = Str(oa, "target_branch");
    e.title = Str(oa, "title");
    auto source = Int(Member(oa, "source_project_id"));
    auto target = Int(Member(oa, "target_project_id"));
    // No source project: it was deleted, so it was not this one.
    e.from_fork = !source || !target || *source != *target;
    const json& project = Member(j, "project");
    for (const json* p : {&project, &Member(oa, "target")}) {
      for (const char* k :
           {"git_http_url", "git_ssh_url", "web_url", "http_url", "ssh_url", "url", "homepage"}) {
        AddUrl(e.repo_urls, Str(*p, k));
      }
    }
    for (const char* k : {"git_http_url", "git_ssh_url", "homepage", "url"}) {
      AddUrl(e.repo_urls, Str(Member(j, "repository"), k));
    }
    e.full_name = Str(project, "path_with_namespace");
    if (e.full_name.empty()) e.full_name = Str(Member(oa, "target"), "path_with_namespace");
    e.default_branch = Str(project, "default_branch");
    bool new_commits = !Str(oa, "oldrev").empty();
    e.runs = e.action == "open" || e.action == "reopen" || (e.action == "update" && new_commits);
  } else {
    const json& pr = Member(j, "pull_request");
    if (!pr.is_object()) {
      return Fail(ErrorKind::kInvalidArgument, "pull request payload has no \"pull_request\"");
    }
    e.action = Str(j, "action");
    e.number = Int(Member(j, "number")).value_or(Int(Member(pr, "number")).value_or(0));
    const json& head = Member(pr, "head");
    const json& base = Member(pr, "base");
    e.head_sha = Lower(Str(head, "sha"));
    e.head_ref = Str(head, "ref");
    e.target_branch = Str(base, "ref");
    e.title = Str(pr, "title");
    const json& head_repo = Member(head, "repo");
    const json& base_repo = Member(base, "repo");
    auto head_id = Int(Member(head_repo, "id"));
    auto base_id = Int(Member(base_repo, "id"));
    if (forge == ForgeKind::kGitea) {
      if (!head_id) head_id = Int(Member(head, "repo_id"));
      if (!base_id) base_id = Int(Member(base, "repo_id"));
    }
    if (head_id && base_id) {
      e.from_fork = *head_id != *base_id;
    } else {
      // A deleted fork has no head repository at all.
      std::string hn = Lower(Str(head_repo, "full_name"));
      e.from_fork = hn.empty() || hn != Lower(Str(base_repo, "full_name"));
    }
    const json& repo = Member(j, "repository");
    for (const json* r : {&repo, &base_repo}) {
      for (const char* k : {"clone_url", "ssh_url", "git_url", "html_url", "url"}) {
        AddUrl(e.repo_urls, Str(*r, k));
      }
    }
    e.full_name = Str(repo, "full_name");
    if (e.full_name.empty()) e.full_name = Str(base_repo, "full_name");
    e.default_branch = Str(repo, "default_branch");
    if (forge == ForgeKind::kGitea) {
      e.runs = e.action == "opened" || e.action == "synchronized" || e.action == "reopened";
    } else {
      e.runs = e.action == "opened" || e.action == "synchronize" || e.action == "reopened";
    }
  }
  if (e.action.empty()) return Fail(ErrorKind::kInvalidArgument, std::string(what) + " has no action");
  if (e.number <= 0) {
    return Fail(ErrorKind::kInvalidArgument, std::string(what) + " has no number");
  }
  if (e.repo_urls.empty() && e.full_name.empty()) {
    return Fail(ErrorKind::kInvalidArgument, std::string(what) + " does not name its repository");
  }
  if (e.runs) {
    if (!IsSha(e.head_sha)) {
      return Fail(ErrorKind::kInvalidArgument,
                  std::string(what) + ": the head commit is not a commit id");
    }
    if (e.target_branch.empty()) {
      return Fail(ErrorKind::kInvalidArgument, std::string(what) + " has no target branch");
    }
  }
  return e;
}

std::string NormaliseRepoUrl(std::string_view url) {
  std::string u(Trim(url));
  auto strip_tail = [](std::string& s) {
    while (!s.empty() && s.back() == '/') s.pop_back();
    if (s.size() > 4 && s.ends_with(".git")) s.resize(s.size() - 4);
    while (!s.empty() && s.back() == '/') s.pop_back();
  };
  if (u.starts_with("file://")) {
    u = u.substr(7);
    strip_tail(u);
    return u;
  }
  if (u.starts_with("/")) {
    strip_tail(u);
    return u;
  }
  auto scheme = u.find("://");
  std::string rest;
  if (scheme != std::string::npos) {
    rest = u.substr(scheme + 3);
  } else {
    // scp-like: user@host:path
    auto colon = u.find(':');
    if (colon == std::string::npos) {
      strip_tail(u);
      return Lower(u);
    }
    rest = u.substr(0, colon) + "/" + u.substr(colon + 1);
  }
  auto slash = rest.find('/');
  auto at = rest.rfind('@', slash == std::string::npos ? rest.size() : slash);
  if (at != std::string::npos) rest = rest.substr(at + 1);
  strip_tail(rest);
  return Lower(rest);
}

std::string_view CommitStateName(CommitState s) {
  switch (s) {
    case CommitState::kPending: return "pending";
    case CommitState::kSuccess: return "success";
    case CommitState::kFailure: return "failure";
    case CommitState::kError: return "error";
  }
  return "error";
}

std::optional<CommitState> ParseCommitState(std::string_view s) {
  for (auto k : {CommitState::kPending, CommitState::kSuccess, CommitState::kFailure,
                 CommitState::kError}) {
    if (CommitStateName(k) == s) return k;
  }
  return std::nullopt;
}

std::string ProjectFromUrl(std::string_view repo_url) {
  std::string n = NormaliseRepoUrl(repo_url);
  if (n.starts_with("/")) return "";
  auto slash = n.find('/');
  if (slash == std::string::npos) return "";
  // Keep the original case of the path: forges show it that way.
  std::string original(Trim(repo_url));
  std::string path = n.substr(slash + 1);
  auto pos = Lower(original).rfind(path);
  return pos == std::string::npos ? path : original.substr(pos, path.size());
}

std::string DefaultApiUrl(ForgeKind forge, std::string_view repo_url) {
  std::string n = NormaliseRepoUrl(repo_url);
  std::string host = n.substr(0, n.find('/'));
  if (n.starts_with("/") || host.empty()) return "";
  switch (forge) {
    case ForgeKind::kGithub:
      return host == "github.com" ? "https://api.github.com" : "https://" + host + "/api/v3";
    case ForgeKind::kGitlab: return "https://" + host + "/api/v4";
    case ForgeKind::kGitea: return "https://" + host + "/api/v1";
    case ForgeKind::kNone: return "";
  }
  return "";
}

ForgeRetry NextForgeRetry(int failed_before, std::int64_t base_ms, int max_attempts) {
  ForgeRetry r;
  r.attempt = failed_before + 1;
  r.give_up = r.attempt >= max_attempts;
  r.delay_ms = base_ms;
  for (int i = 1; i < r.attempt && r.delay_ms < 3'600'000; ++i) r.delay_ms *= 2;
  return r;
}

std::string ForgeHttpError(const HttpResponse& response, const std::string& where) {
  std::string body = response.body.substr(0, 200);
  for (auto& c : body) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return "HTTP " + std::to_string(response.status) + " from " + where +
         (body.empty() ? "" : ": " + body);
}

std::string FitStatusDescription(std::string text) {
  if (text.size() <= kMaxStatusDescription) return text;
  std::size_t cut = kMaxStatusDescription - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return text.substr(0, cut) + "...";
}

HttpRequest CommitStatusRequest(const StatusTarget& target, const std::string& sha,
                                CommitState state, const std::string& context,
                                const std::string& description, const std::string& target_url) {
  std::string desc = FitStatusDescription(description);
  std::string base = target.api_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  HttpRequest r;
  r.method = "POST";
  r.timeout_ms = 10'000;
  r.headers.emplace_back("Content-Type", "application/json");
  json body;
  switch (target.forge) {
    case ForgeKind::kGitlab: {
      r.url = base + "/projects/" + UrlEncode(target.project) + "/statuses/" + sha;
      r.headers.emplace_back("PRIVATE-TOKEN", target.token);
      std::string s = state == CommitState::kPending   ? "pending"
                      : state == CommitState::kSuccess ? "success"
                                                       : "failed";
      body = {{"state", s}, {"name", context}, {"description", desc}};
      break;
    }
    case ForgeKind::kGitea:
      r.url = base + "/repos/" + target.project + "/statuses/" + sha;
      r.headers.emplace_back("Authorization", "token " + target.token);
      r.headers.emplace_back("Accept", "application/json");
      body = {{"state", CommitStateName(state)}, {"context", context}, {"description", desc}};
      break;
    case ForgeKind::kGithub:
    case ForgeKind::kNone:
      r.url = base + "/repos/" + target.project + "/statuses/" + sha;
      r.headers.emplace_back("Authorization", "Bearer " + target.token);
      r.headers.emplace_back("Accept", "application/vnd.github+json");
      r.headers.emplace_back("X-GitHub-Api-Version", "2022-11-28");
      body = {{"state", CommitStateName(state)}, {"context", context}, {"description", desc}};
      break;
  }
  if (!target_url.empty()) body["target_url"] = target_url;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

namespace {

std::string ApiBase(const StatusTarget& target) {
  std::string base = target.api_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base;
}

// The headers every forge API request carries, as CommitStatusRequest sends
// them, plus User-Agent (GitHub refuses requests without one).
void ApiHeaders(const StatusTarget& target, HttpRequest& r) {
  r.timeout_ms = 10'000;
  r.headers.emplace_back("Content-Type", "application/json");
  r.headers.emplace_back("User-Agent", std::string(kForgeUserAgent));
  switch (target.forge) {
    case ForgeKind::kGitlab:
      r.headers.emplace_back("PRIVATE-TOKEN", target.token);
      r.headers.emplace_back("Accept", "application/json");
      break;
    case ForgeKind::kGitea:
      r.headers.emplace_back("Authorization", "token " + target.token);
      r.headers.emplace_back("Accept", "application/json");
      break;
    case ForgeKind::kGithub:
    case ForgeKind::kNone:
      r.headers.emplace_back("Authorization", "Bearer " + target.token);
      r.headers.emplace_back("Accept", "application/vnd.github+json");
      r.headers.emplace_back("X-GitHub-Api-Version", "2022-11-28");
      break;
  }
}

std::string BodyJson(const std::string& body) {
  return json{{"body", body}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

HttpRequest CreateCommentRequest(const StatusTarget& target, std::int64_t pr_number,
                                 const std::string& body) {
  HttpRequest r;
  r.method = "POST";
  std::string n = std::to_string(pr_number);
  if (target.forge == ForgeKind::kGitlab) {
    r.url = ApiBase(target) + "/projects/" + UrlEncode(target.project) + "/merge_requests/" + n +
            "/notes";
  } else {
    r.url = ApiBase(target) + "/repos/" + target.project + "/issues/" + n + "/comments";
  }
  ApiHeaders(target, r);
  r.body = BodyJson(body);
  return r;
}

HttpRequest EditCommentRequest(const StatusTarget& target, std::int64_t pr_number,
                               const std::string& comment_id, const std::string& body) {
  HttpRequest r;
  if (target.forge == ForgeKind::kGitlab) {
    r.method = "PUT";
    r.url = ApiBase(target) + "/projects/" + UrlEncode(target.project) + "/merge_requests/" +
            std::to_string(pr_number) + "/notes/" + UrlEncode(comment_id);
  } else {
    r.method = "PATCH";
    r.url = ApiBase(target) + "/repos/" + target.project + "/issues/comments/" +
            UrlEncode(comment_id);
  }
  ApiHeaders(target, r);
  r.body = BodyJson(body);
  return r;
}

Result<std::string> ParseCreatedCommentId(std::string_view response_body) {
  json j = json::parse(response_body.begin(), response_body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(ErrorKind::kInvalidArgument, "the forge's answer is not a JSON object");
  }
  const json& id = Member(j, "id");
  if (id.is_number_integer()) return std::to_string(id.get<std::int64_t>());
  if (id.is_string() && !id.get<std::string>().empty()) return id.get<std::string>();
  return Fail(ErrorKind::kInvalidArgument, "the forge's answer has no comment \"id\"");
}

}  // namespace trainq
