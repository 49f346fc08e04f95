#include "agent/repo/mirror.h"

#include <git2.h>

#include <algorithm>
#include <filesystem>

#include "core/crypto.h"
#include "agent/repo/git_util.h"
#include "core/http_client.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

struct CredentialState {
  const FetchAuth* auth;
  int calls = 0;
};

int Credentials(git_credential** out, const char* /*url*/, const char* username_from_url,
                unsigned int allowed, void* payload) {
  auto* st = static_cast<CredentialState*>(payload);
  // libgit2 asks again after a refusal; one try per kind is enough.
  if (++st->calls > 2) return GIT_EAUTH;
  const FetchAuth& a = *st->auth;
  if ((allowed & GIT_CREDENTIAL_USERPASS_PLAINTEXT) && !a.token.empty()) {
    std::string user = a.username.empty() ? "x-access-token" : a.username;
    return git_credential_userpass_plaintext_new(out, user.c_str(), a.token.c_str());
  }
  std::string user = username_from_url && *username_from_url ? username_from_url : "git";
  if (allowed & GIT_CREDENTIAL_SSH_KEY) {
    if (!a.ssh_key.empty()) {
      return git_credential_ssh_key_new(out, user.c_str(), nullptr, a.ssh_key.c_str(), nullptr);
    }
    return git_credential_ssh_key_from_agent(out, user.c_str());
  }
  if (allowed & GIT_CREDENTIAL_USERNAME) return git_credential_username_new(out, user.c_str());
  return GIT_PASSTHROUGH;
}

std::string SafeName(std::string_view url) {
  std::string u(url);
  while (!u.empty() && u.back() == '/') u.pop_back();
  auto slash = u.find_last_of("/:");
  std::string name = slash == std::string::npos ? u : u.substr(slash + 1);
  if (name.size() > 4 && name.ends_with(".git")) name.resize(name.size() - 4);
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  if (name.empty() || name == "." || name == "..") name = "repo";
  return name;
}

}  // namespace

Result<Mirror*> MirrorCache::Get(const std::string& url) {
  auto it = mirrors_.find(url);
  if (it == mirrors_.end()) {
    ASSIGN_OR_RETURN(auto m, Mirror::Open(Mirror::PathFor(data_dir_, url), url));
    it = mirrors_.emplace(url, std::move(m)).first;
  }
  return &it->second;
}

bool GitSupportsSsh() {
  git::EnsureInit();
  return (git_libgit2_features() & GIT_FEATURE_SSH) != 0;
}

bool GitSupportsHttps() {
  git::EnsureInit();
  return (git_libgit2_features() & GIT_FEATURE_HTTPS) != 0;
}

std::string Mirror::PathFor(const std::string& data_dir, const std::string& url) {
  return (fs::path(data_dir) / "mirrors" / Sha256Hex(url).substr(0, 12) / (SafeName(url) + ".git"))
      .string();
}

Result<Mirror> Mirror::Open(const std::string& dir, const std::string& url) {
  git::EnsureInit();
  git_repository* repo = nullptr;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "HEAD", ec)) {
    if (git_repository_open_bare(&repo, dir.c_str()) != 0) {
      return Fail(ErrorKind::kCorruption, dir + ": not a usable mirror (" + git::LastError() + ")");
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) return Fail(ErrorKind::kIo, dir + ": " + ec.message());
    if (git_repository_init(&repo, dir.c_str(), /*is_bare=*/1) != 0) {
      return Fail(ErrorKind::kIo, dir + ": cannot create a mirror (" + git::LastError() + ")");
    }
  }
  return Mirror(repo, fs::absolute(dir).lexically_normal().string(), url);
}

Status Mirror::Fetch(const FetchAuth& auth, const std::vector<std::string>& extra_refs) {
  std::string shown = UrlForLog(url_);
  git::Owned<git_remote, git_remote_free> remote;
  // An anonymous remote, as git_remote_create_anonymous makes, minus the
  // url.<base>.insteadOf rewriting: libgit2 1.5 (Debian 12) leaks a pcre2
  // match data (~20 KiB) for every config entry that lookup does not match,
  // about 120 KiB a fetch, which LeakSanitizer found in `trainq serve`. The
  // URL trainq fetches is the one its config names, unrewritten.
  git_remote_create_options create = GIT_REMOTE_CREATE_OPTIONS_INIT;
  create.repository = repo_;
  create.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF;
  if (git_remote_create_with_opts(&remote.p, url_.c_str(), &create) != 0) {
    return Fail(ErrorKind::kInvalidArgument, shown + ": " + git::LastError());
  }
  CredentialState cred{&auth};
  git_remote_callbacks callbacks = GIT_REMOTE_CALLBACKS_INIT;
  callbacks.credentials = Credentials;
  callbacks.payload = &cred;
  if (git_remote_connect(remote.p, GIT_DIRECTION_FETCH, &callbacks, nullptr, nullptr) != 0) {
    return Fail(ErrorKind::kUnavailable, "fetching " + shown + ": " + git::LastError());
  }
  // Remember which branch the remote's HEAD names: the default branch.
  git_buf head = GIT_BUF_INIT;
  if (git_remote_default_branch(&head, remote.p) == 0) {
    git_repository_set_head(repo_, head.ptr);
  }
  git_buf_dispose(&head);

  std::vector<std::string> spec_strings = {"+refs/heads/*:refs/heads/*",
                                           "+refs/tags/*:refs/tags/*"};
  for (const auto& ref : extra_refs) spec_strings.push_back("+" + ref + ":" + ref);
  std::vector<char*> specs;
  for (auto& spec : spec_strings) specs.push_back(spec.data());
  git_strarray refspecs{specs.data(), specs.size()};
  git_fetch_options opts = GIT_FETCH_OPTIONS_INIT;
  opts.callbacks = callbacks;
  opts.prune = GIT_FETCH_PRUNE;
  opts.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_NONE;
  opts.update_fetchhead = 0;
  int rc = git_remote_fetch(remote.p, &refspecs, &opts, "trainq mirror fetch");
  git_remote_disconnect(remote.p);
  if (rc != 0) return Fail(ErrorKind::kUnavailable, "fetching " + shown + ": " + git::LastError());
  return {};
}

Result<std::map<std::string, std::string>> Mirror::Refs() {
  std::map<std::string, std::string> out;
  for (const char* glob : {"refs/heads/*", "refs/tags/*"}) {
    git::Owned<git_reference_iterator, git_reference_iterator_free> it;
    if (git_reference_iterator_glob_new(&it.p, repo_, glob) != 0) {
      return Fail(ErrorKind::kIo, location() + ": listing refs: " + git::LastError());
    }
    git_reference* ref = nullptr;
    while (git_reference_next(&ref, it.p) == 0) {
      git::Owned<git_reference, git_reference_free> owned;
      owned.p = ref;
      git::Owned<git_object, git_object_free> obj;
      if (git_reference_peel(&obj.p, ref, GIT_OBJECT_COMMIT) == 0) {
        out[git_reference_name(ref)] = git::OidHex(git_object_id(obj.p));
      }
    }
  }
  return out;
}

std::string Mirror::DefaultBranch() {
  git::Owned<git_reference, git_reference_free> head;
  if (git_reference_lookup(&head.p, repo_, "HEAD") != 0) return "";
  if (git_reference_type(head.p) != GIT_REFERENCE_SYMBOLIC) return "";
  std::string target = git_reference_symbolic_target(head.p);
  const std::string prefix = "refs/heads/";
  return target.starts_with(prefix) ? target.substr(prefix.size()) : "";
}

}  // namespace trainq
