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

using git::EnsureInit;
constexpr auto LastGitError = git::LastError;
template <typename T, void (*Free)(T*)>
using Owned = git::Owned<T, Free>;

std::string OidHex(const git_oid* oid) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, oid);
  return buf;
}

Result<git_oid> ParseOid(const std::string& sha) {
  git_oid oid;
  if (sha.size() != GIT_OID_HEXSZ || git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  return oid;
}

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
  EnsureInit();
  return (git_libgit2_features() & GIT_FEATURE_SSH) != 0;
}

bool GitSupportsHttps() {
  EnsureInit();
  return (git_libgit2_features() & GIT_FEATURE_HTTPS) != 0;
}

std::string Mirror::PathFor(const std::string& data_dir, const std::string& url) {
  return (fs::path(data_dir) / "mirrors" / Sha256Hex(url).substr(0, 12) / (SafeName(url) + ".git"))
      .string();
}

Result<Mirror> Mirror::Open(const std::string& dir, const std::string& url) {
  EnsureInit();
  git_repository* repo = nullptr;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "HEAD", ec)) {
    if (git_repository_open_bare(&repo, dir.c_str()) != 0) {
      return Fail(ErrorKind::kCorruption, dir + ": not a usable mirror (" + LastGitError() + ")");
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) return Fail(ErrorKind::kIo, dir + ": " + ec.message());
    if (git_repository_init(&repo, dir.c_str(), /*is_bare=*/1) != 0) {
      return Fail(ErrorKind::kIo, dir + ": cannot create a mirror (" + LastGitError() + ")");
    }
  }
  return Mirror(repo, fs::absolute(dir).lexically_normal().string(), url);
}

Mirror::Mirror(Mirror&& o) noexcept
    : repo_(o.repo_), path_(std::move(o.path_)), url_(std::move(o.url_)) {
  o.repo_ = nullptr;
}

Mirror& Mirror::operator=(Mirror&& o) noexcept {
  if (this != &o) {
    if (repo_) git_repository_free(repo_);
    repo_ = o.repo_;
    path_ = std::move(o.path_);
    url_ = std::move(o.url_);
    o.repo_ = nullptr;
  }
  return *this;
}

Mirror::~Mirror() {
  if (repo_) git_repository_free(repo_);
}

Status Mirror::Fetch(const FetchAuth& auth, const std::vector<std::string>& extra_refs) {
  std::string shown = UrlForLog(url_);
  Owned<git_remote, git_remote_free> remote;
  // An anonymous remote, as git_remote_create_anonymous makes, minus the
  // url.<base>.insteadOf rewriting: libgit2 1.5 (Debian 12) leaks a pcre2
  // match data (~20 KiB) for every config entry that lookup does not match,
  // about 120 KiB a fetch, which LeakSanitizer found in `trainq serve`. The
  // URL trainq fetches is the one its config names, unrewritten.
  git_remote_create_options create = GIT_REMOTE_CREATE_OPTIONS_INIT;
  create.repository = repo_;
  create.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF;
  if (git_remote_create_with_opts(&remote.p, url_.c_str(), &create) != 0) {
    return Fail(ErrorKind::kInvalidArgument, shown + ": " + LastGitError());
  }
  CredentialState cred{&auth};
  git_remote_callbacks callbacks = GIT_REMOTE_CALLBACKS_INIT;
  callbacks.credentials = Credentials;
  callbacks.payload = &cred;
  if (git_remote_connect(remote.p, GIT_DIRECTION_FETCH, &callbacks, nullptr, nullptr) != 0) {
    return Fail(ErrorKind::kUnavailable, "fetching " + shown + ": " + LastGitError());
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
  if (rc != 0) return Fail(ErrorKind::kUnavailable, "fetching " + shown + ": " + LastGitError());
  return {};
}

bool Mirror::HasCommit(const std::string& sha) {
  auto oid = ParseOid(sha);
  if (!oid) return false;
  Owned<git_commit, git_commit_free> c;
  return git_commit_lookup(&c.p, repo_, &*oid) == 0;
}

Result<std::map<std::string, std::string>> Mirror::Refs() {
  std::map<std::string, std::string> out;
  for (const char* glob : {"refs/heads/*", "refs/tags/*"}) {
    Owned<git_reference_iterator, git_reference_iterator_free> it;
    if (git_reference_iterator_glob_new(&it.p, repo_, glob) != 0) {
      return Fail(ErrorKind::kIo, path_ + ": listing refs: " + LastGitError());
    }
    git_reference* ref = nullptr;
    while (git_reference_next(&ref, it.p) == 0) {
      Owned<git_reference, git_reference_free> owned;
      owned.p = ref;
      Owned<git_object, git_object_free> obj;
      if (git_reference_peel(&obj.p, ref, GIT_OBJECT_COMMIT) == 0) {
        out[git_reference_name(ref)] = OidHex(git_object_id(obj.p));
      }
    }
  }
  return out;
}

std::string Mirror::DefaultBranch() {
  Owned<git_reference, git_reference_free> head;
  if (git_reference_lookup(&head.p, repo_, "HEAD") != 0) return "";
  if (git_reference_type(head.p) != GIT_REFERENCE_SYMBOLIC) return "";
  std::string target = git_reference_symbolic_target(head.p);
  const std::string prefix = "refs/heads/";
  return target.starts_with(prefix) ? target.substr(prefix.size()) : "";
}

Result<std::optional<std::string>> Mirror::ResolveRef(const std::string& ref) {
  Owned<git_reference, git_reference_free> r;
  int rc = git_reference_lookup(&r.p, repo_, ref.c_str());
  if (rc == GIT_ENOTFOUND) return std::optional<std::string>();
  if (rc != 0) return Fail(ErrorKind::kIo, path_ + ": " + ref + ": " + LastGitError());
  Owned<git_object, git_object_free> obj;
  if (git_reference_peel(&obj.p, r.p, GIT_OBJECT_COMMIT) != 0) return std::optional<std::string>();
  return std::optional<std::string>(OidHex(git_object_id(obj.p)));
}

Result<bool> Mirror::IsAncestor(const std::string& ancestor, const std::string& descendant) {
  ASSIGN_OR_RETURN(auto a, ParseOid(ancestor));
  ASSIGN_OR_RETURN(auto d, ParseOid(descendant));
  if (git_oid_equal(&a, &d)) return true;
  int rc = git_graph_descendant_of(repo_, &d, &a);
  if (rc < 0) return Fail(ErrorKind::kIo, path_ + ": " + LastGitError());
  return rc == 1;
}

Result<std::optional<std::string>> Mirror::MergeBase(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(auto oa, ParseOid(a));
  ASSIGN_OR_RETURN(auto ob, ParseOid(b));
  git_oid out;
  int rc = git_merge_base(&out, repo_, &oa, &ob);
  if (rc == GIT_ENOTFOUND) return std::optional<std::string>();
  if (rc != 0) return Fail(ErrorKind::kIo, path_ + ": merge base: " + LastGitError());
  return std::optional<std::string>(OidHex(&out));
}

Result<std::optional<std::string>> Mirror::FirstParent(const std::string& sha) {
  ASSIGN_OR_RETURN(auto oid, ParseOid(sha));
  Owned<git_commit, git_commit_free> c;
  if (git_commit_lookup(&c.p, repo_, &oid) != 0) {
    return Fail(ErrorKind::kNotFound, path_ + ": no commit " + sha);
  }
  if (git_commit_parentcount(c.p) == 0) return std::optional<std::string>();
  return std::optional<std::string>(OidHex(git_commit_parent_id(c.p, 0)));
}

Result<std::vector<std::string>> Mirror::CommitsBetween(const std::string& base,
                                                        const std::string& head, size_t limit) {
  ASSIGN_OR_RETURN(auto h, ParseOid(head));
  Owned<git_revwalk, git_revwalk_free> walk;
  if (git_revwalk_new(&walk.p, repo_) != 0) return Fail(ErrorKind::kIo, LastGitError());
  git_revwalk_sorting(walk.p, GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
  if (git_revwalk_push(walk.p, &h) != 0) {
    return Fail(ErrorKind::kNotFound, path_ + ": no commit " + head);
  }
  if (!base.empty()) {
    ASSIGN_OR_RETURN(auto b, ParseOid(base));
    if (git_revwalk_hide(walk.p, &b) != 0) {
      return Fail(ErrorKind::kNotFound, path_ + ": no commit " + base);
    }
  }
  std::vector<std::string> out;
  git_oid oid;
  while (git_revwalk_next(&oid, walk.p) == 0) out.push_back(OidHex(&oid));
  if (out.size() > limit) out.erase(out.begin(), out.end() - static_cast<long>(limit));
  return out;
}

Result<std::vector<ChangedPath>> Mirror::Diff(const std::string& base, const std::string& sha) {
  auto tree_of = [&](const std::string& s, git_tree** tree) -> Status {
    ASSIGN_OR_RETURN(auto oid, ParseOid(s));
    Owned<git_commit, git_commit_free> c;
    if (git_commit_lookup(&c.p, repo_, &oid) != 0) {
      return Fail(ErrorKind::kNotFound, path_ + ": no commit " + s);
    }
    if (git_commit_tree(tree, c.p) != 0) {
      return Fail(ErrorKind::kCorruption, path_ + ": cannot read the tree of " + s);
    }
    return {};
  };
  Owned<git_tree, git_tree_free> old_tree, new_tree;
  if (!base.empty()) TRY(tree_of(base, &old_tree.p));
  TRY(tree_of(sha, &new_tree.p));
  Owned<git_diff, git_diff_free> diff;
  git_diff_options opts = GIT_DIFF_OPTIONS_INIT;
  if (git_diff_tree_to_tree(&diff.p, repo_, old_tree.p, new_tree.p, &opts) != 0) {
    return Fail(ErrorKind::kIo, path_ + ": diff: " + LastGitError());
  }
  git_diff_find_options find = GIT_DIFF_FIND_OPTIONS_INIT;
  find.flags = GIT_DIFF_FIND_RENAMES;
  if (git_diff_find_similar(diff.p, &find) != 0) {
    return Fail(ErrorKind::kIo, path_ + ": rename detection: " + LastGitError());
  }
  std::vector<ChangedPath> out;
  size_t n = git_diff_num_deltas(diff.p);
  for (size_t i = 0; i < n; ++i) {
    const git_diff_delta* d = git_diff_get_delta(diff.p, i);
    ChangedPath c;
    std::string old_path = d->old_file.path ? d->old_file.path : "";
    std::string new_path = d->new_file.path ? d->new_file.path : "";
    switch (d->status) {
      case GIT_DELTA_ADDED:
        c = {ChangedPath::Kind::kAdded, "", new_path};
        break;
      case GIT_DELTA_DELETED:
        c = {ChangedPath::Kind::kDeleted, old_path, ""};
        break;
      case GIT_DELTA_RENAMED:
        c = {ChangedPath::Kind::kRenamed, old_path, new_path};
        break;
      case GIT_DELTA_COPIED:
        c = {ChangedPath::Kind::kCopied, old_path, new_path};
        break;
      case GIT_DELTA_TYPECHANGE:
        c = {ChangedPath::Kind::kTypeChanged, old_path, new_path};
        break;
      default:
        c = {ChangedPath::Kind::kModified, old_path, new_path};
        break;
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trainq
