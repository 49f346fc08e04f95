#include "agent/repo/git_repo.h"

#include <git2.h>

#include <algorithm>
#include <filesystem>

#include "agent/repo/git_util.h"

namespace trainq {

namespace {

using git::EnsureInit;
constexpr auto LastGitError = git::LastError;
template <typename T, void (*Free)(T*)>
using GitPtr = git::Owned<T, Free>;

// The root tree of commit `sha` in `repo` (`location` names it in errors).
Status CommitTree(git_repository* repo, const std::string& location, const std::string& sha,
                  GitPtr<git_tree, git_tree_free>& tree) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  GitPtr<git_commit, git_commit_free> commit;
  if (git_commit_lookup(&commit.p, repo, &oid) != 0) {
    return Fail(ErrorKind::kNotFound, location + ": no commit " + sha);
  }
  if (git_commit_tree(&tree.p, commit.p) != 0) {
    return Fail(ErrorKind::kCorruption, location + ": cannot read tree of " + sha);
  }
  return {};
}

}  // namespace

Result<GitRepo> GitRepo::Open(const std::string& dir) {
  EnsureInit();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Fail(ErrorKind::kNotFound, dir + ": no such directory");
  }
  git_repository* repo = nullptr;
  if (git_repository_open_ext(&repo, dir.c_str(), GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr) != 0) {
    return Fail(ErrorKind::kInvalidArgument, dir + ": not a git repository (" + LastGitError() +
                                                 ")");
  }
  const char* wd = git_repository_workdir(repo);
  std::string loc = wd ? wd : git_repository_path(repo);
  while (loc.size() > 1 && loc.back() == '/') loc.pop_back();
  return GitRepo(repo, std::filesystem::weakly_canonical(loc).string());
}

Result<std::vector<std::string>> GitRepo::UncommittedPaths() {
  std::vector<std::string> out;
  if (git_repository_is_bare(repo_)) return out;
  git_status_options opts = GIT_STATUS_OPTIONS_INIT;
  opts.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
  opts.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED | GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS |
               GIT_STATUS_OPT_EXCLUDE_SUBMODULES;
  GitPtr<git_status_list, git_status_list_free> list;
  if (git_status_list_new(&list.p, repo_, &opts) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": git status: " + LastGitError());
  }
  for (size_t i = 0; i < git_status_list_entrycount(list.p); ++i) {
    const git_status_entry* e = git_status_byindex(list.p, i);
    if (!e || e->status == GIT_STATUS_CURRENT || (e->status & GIT_STATUS_IGNORED)) continue;
    const git_diff_delta* d = e->index_to_workdir ? e->index_to_workdir : e->head_to_index;
    if (!d) continue;
    const char* path = d->new_file.path ? d->new_file.path : d->old_file.path;
    if (path) out.emplace_back(path);
  }
  return out;
}

GitRepo::GitRepo(GitRepo&& o) noexcept : repo_(o.repo_), location_(std::move(o.location_)) {
  o.repo_ = nullptr;
}

GitRepo& GitRepo::operator=(GitRepo&& o) noexcept {
  if (this != &o) {
    if (repo_) git_repository_free(repo_);
    repo_ = o.repo_;
    location_ = std::move(o.location_);
    o.repo_ = nullptr;
  }
  return *this;
}

GitRepo::~GitRepo() {
  if (repo_) git_repository_free(repo_);
}

Result<CommitInfo> GitRepo::Resolve(const std::string& rev) {
  GitPtr<git_object, git_object_free> obj;
  if (git_revparse_single(&obj.p, repo_, rev.c_str()) != 0) {
    return Fail(ErrorKind::kNotFound,
                location_ + ": unknown revision '" + rev + "' (" + LastGitError() + ")");
  }
  GitPtr<git_object, git_object_free> peeled;
  if (git_object_peel(&peeled.p, obj.p, GIT_OBJECT_COMMIT) != 0) {
    return Fail(ErrorKind::kInvalidArgument,
                location_ + ": revision '" + rev + "' does not name a commit");
  }
  auto* commit = reinterpret_cast<git_commit*>(peeled.p);
  CommitInfo info;
  char sha[GIT_OID_HEXSZ + 1];
  git_oid_tostr(sha, sizeof sha, git_commit_id(commit));
  info.sha = sha;
  if (git_commit_parentcount(commit) > 0) {
    git_oid_tostr(sha, sizeof sha, git_commit_parent_id(commit, 0));
    info.parent_sha = sha;
  }
  const char* summary = git_commit_summary(commit);
  info.message = summary ? summary : "";
  const git_signature* author = git_commit_author(commit);
  if (author) info.author = author->name ? author->name : "";
  info.committed_ms = static_cast<TimeMs>(git_commit_time(commit)) * 1000;
  return info;
}

std::string GitRepo::DefaultBranch() {
  GitPtr<git_reference, git_reference_free> head;
  if (git_repository_head(&head.p, repo_) == 0 && git_reference_is_branch(head.p)) {
    return git_reference_shorthand(head.p);
  }
  // An unborn HEAD still names its branch.
  GitPtr<git_reference, git_reference_free> sym;
  if (git_reference_lookup(&sym.p, repo_, "HEAD") == 0 &&
      git_reference_type(sym.p) == GIT_REFERENCE_SYMBOLIC) {
    std::string target = git_reference_symbolic_target(sym.p);
    GitPtr<git_reference, git_reference_free> b;
    if (target.starts_with("refs/heads/") && git_reference_lookup(&b.p, repo_, target.c_str()) == 0) {
      return target.substr(11);
    }
  }
  for (const char* name : {"main", "master"}) {
    GitPtr<git_reference, git_reference_free> b;
    if (git_branch_lookup(&b.p, repo_, name, GIT_BRANCH_LOCAL) == 0) return name;
  }
  return "";
}

Result<std::vector<std::string>> GitRepo::Branches() {
  GitPtr<git_branch_iterator, git_branch_iterator_free> it;
  if (git_branch_iterator_new(&it.p, repo_, GIT_BRANCH_LOCAL) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": cannot list branches (" + LastGitError() + ")");
  }
  std::vector<std::string> out;
  while (true) {
    git_reference* ref = nullptr;
    git_branch_t type;
    if (git_branch_next(&ref, &type, it.p) != 0) break;
    GitPtr<git_reference, git_reference_free> owned;
    owned.p = ref;
    const char* name = nullptr;
    if (git_branch_name(&name, ref) == 0 && name) out.emplace_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<std::string>> GitRepo::FirstParents(const std::string& branch, size_t limit) {
  GitPtr<git_reference, git_reference_free> ref;
  if (branch.empty() || git_branch_lookup(&ref.p, repo_, branch.c_str(), GIT_BRANCH_LOCAL) != 0) {
    return Fail(ErrorKind::kNotFound, location_ + ": no branch '" + branch + "'");
  }
  GitPtr<git_object, git_object_free> obj;
  if (git_reference_peel(&obj.p, ref.p, GIT_OBJECT_COMMIT) != 0) {
    return Fail(ErrorKind::kInvalidArgument,
                location_ + ": branch '" + branch + "' does not name a commit");
  }
  git_oid oid = *git_object_id(obj.p);
  std::vector<std::string> out;
  char sha[GIT_OID_HEXSZ + 1];
  while (out.size() < limit) {
    git_oid_tostr(sha, sizeof sha, &oid);
    out.emplace_back(sha);
    GitPtr<git_commit, git_commit_free> c;
    if (git_commit_lookup(&c.p, repo_, &oid) != 0) {
      return Fail(ErrorKind::kCorruption, location_ + ": cannot read commit " + out.back());
    }
    // A shallow or partial mirror may lack the parent: the line ends there.
    if (git_commit_parentcount(c.p) == 0) break;
    oid = *git_commit_parent_id(c.p, 0);
    GitPtr<git_commit, git_commit_free> parent;
    if (git_commit_lookup(&parent.p, repo_, &oid) != 0) break;
  }
  return out;
}

Result<std::string> GitRepo::ReadFile(const std::string& sha, const std::string& path) {
  GitPtr<git_tree, git_tree_free> tree;
  TRY(CommitTree(repo_, location_, sha, tree));
  GitPtr<git_tree_entry, git_tree_entry_free> entry;
  if (git_tree_entry_bypath(&entry.p, tree.p, path.c_str()) != 0) {
    return Fail(ErrorKind::kNotFound,
                path + " not found at commit " + sha.substr(0, 12) + " in " + location_);
  }
  if (git_tree_entry_type(entry.p) != GIT_OBJECT_BLOB) {
    return Fail(ErrorKind::kInvalidArgument, path + " is not a file at commit " + sha.substr(0, 12));
  }
  GitPtr<git_blob, git_blob_free> blob;
  if (git_blob_lookup(&blob.p, repo_, git_tree_entry_id(entry.p)) != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": cannot read " + path);
  }
  return std::string(static_cast<const char*>(git_blob_rawcontent(blob.p)),
                     static_cast<size_t>(git_blob_rawsize(blob.p)));
}

Result<std::vector<std::pair<std::string, std::string>>> GitRepo::TreeFiles(const std::string& sha) {
  GitPtr<git_tree, git_tree_free> tree;
  TRY(CommitTree(repo_, location_, sha, tree));
  std::vector<std::pair<std::string, std::string>> files;
  auto visit = [](const char* root, const git_tree_entry* entry, void* payload) -> int {
    if (git_tree_entry_type(entry) != GIT_OBJECT_BLOB) return 0;
    char hex[GIT_OID_HEXSZ + 1];
    git_oid_tostr(hex, sizeof hex, git_tree_entry_id(entry));
    static_cast<std::vector<std::pair<std::string, std::string>>*>(payload)->emplace_back(
        std::string(root) + git_tree_entry_name(entry), hex);
    return 0;
  };
  if (git_tree_walk(tree.p, GIT_TREEWALK_PRE, visit, &files) != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": cannot walk the tree of " + sha);
  }
  return files;
}

Status GitRepo::CheckoutTo(const std::string& sha, const std::string& target) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  GitPtr<git_commit, git_commit_free> commit;
  if (git_commit_lookup(&commit.p, repo_, &oid) != 0) {
    return Fail(ErrorKind::kNotFound, location_ + ": no commit " + sha);
  }
  std::error_code ec;
  std::filesystem::create_directories(target, ec);
  if (ec) return Fail(ErrorKind::kIo, target + ": " + ec.message());
  git_checkout_options opts = GIT_CHECKOUT_OPTIONS_INIT;
  opts.checkout_strategy = GIT_CHECKOUT_FORCE | GIT_CHECKOUT_DONT_UPDATE_INDEX |
                           GIT_CHECKOUT_RECREATE_MISSING;
  opts.target_directory = target.c_str();
  // A private, empty index: the checkout must not consult or change the
  // repository's own index (the user's staged work).
  GitPtr<git_index, git_index_free> index;
  if (git_index_new(&index.p) != 0) return Fail(ErrorKind::kInternal, LastGitError());
  opts.baseline_index = index.p;
  if (git_checkout_tree(repo_, reinterpret_cast<git_object*>(commit.p), &opts) != 0) {
    return Fail(ErrorKind::kIo, "checking out " + sha.substr(0, 12) + " into " + target + ": " +
                                    LastGitError());
  }
  return {};
}

Result<std::string> GitRepo::PackCommit(const std::string& sha) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  if (!HasCommit(sha)) return Fail(ErrorKind::kNotFound, location_ + ": no commit " + sha);
  GitPtr<git_packbuilder, git_packbuilder_free> pb;
  if (git_packbuilder_new(&pb.p, repo_) != 0) return Fail(ErrorKind::kInternal, LastGitError());
  // The commit and its whole tree; parents are only named, never sent.
  if (git_packbuilder_insert_commit(pb.p, &oid) != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": packing " + sha.substr(0, 12) + ": " +
                                            LastGitError());
  }
  git_buf buf = GIT_BUF_INIT;
  if (git_packbuilder_write_buf(&buf, pb.p) != 0) {
    return Fail(ErrorKind::kInternal, location_ + ": packing " + sha.substr(0, 12) + ": " +
                                          LastGitError());
  }
  std::string out(buf.ptr, buf.size);
  git_buf_dispose(&buf);
  return out;
}

bool GitRepo::HasCommit(const std::string& sha) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) return false;
  GitPtr<git_commit, git_commit_free> commit;
  return git_commit_lookup(&commit.p, repo_, &oid) == 0;
}

Result<GitRepo> GitRepo::OpenOrInitBare(const std::string& dir) {
  EnsureInit();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    git_repository* repo = nullptr;
    if (git_repository_init(&repo, dir.c_str(), /*is_bare=*/1) != 0) {
      return Fail(ErrorKind::kIo, dir + ": cannot create a repository (" + LastGitError() + ")");
    }
    git_repository_free(repo);
  }
  return Open(dir);
}

Status GitRepo::AddPack(std::string_view pack) {
  GitPtr<git_odb, git_odb_free> odb;
  if (git_repository_odb(&odb.p, repo_) != 0) return Fail(ErrorKind::kIo, LastGitError());
  git_odb_writepack* wp = nullptr;
  if (git_odb_write_pack(&wp, odb.p, nullptr, nullptr) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": " + LastGitError());
  }
  git_indexer_progress stats{};
  int rc = wp->append(wp, pack.data(), pack.size(), &stats);
  if (rc == 0) rc = wp->commit(wp, &stats);
  std::string err = rc == 0 ? "" : LastGitError();
  wp->free(wp);
  if (rc != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": a packfile of " +
                                            std::to_string(pack.size()) +
                                            " bytes was refused: " + err);
  }
  return {};
}

std::string GitDirOf(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path git = std::filesystem::path(dir) / ".git";
  if (std::filesystem::is_directory(git, ec)) return git.string();
  return dir;
}

Result<std::string> ResolveRevision(const std::string& rev, const std::string& repo_dir) {
  std::string git_error;
  if (!repo_dir.empty()) {
    auto repo = GitRepo::Open(repo_dir);
    if (repo) {
      auto commit = repo->Resolve(rev);
      if (commit) return commit->sha;
      git_error = commit.error().message;
    } else {
      git_error = repo.error().message;
    }
  }
  bool hex = rev.size() >= 4 && rev.size() <= 40;
  for (char c : rev) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
  if (hex) return rev;
  return Fail(ErrorKind::kNotFound,
              "cannot resolve '" + rev + "'" +
                  (git_error.empty() ? " (pass --repo DIR to resolve branch names)"
                                     : ": " + git_error));
}

}  // namespace trainq
