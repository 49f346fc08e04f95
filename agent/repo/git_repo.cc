#include "agent/repo/git_repo.h"

#include <git2.h>

#include <filesystem>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_util.h"

namespace trainq {

namespace {

Result<git_oid> ParseOid(const std::string& sha) {
  git_oid oid;
  if (sha.size() != GIT_OID_HEXSZ || git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  return oid;
}

// The root tree of commit `sha` in `repo` (`location` names it in errors).
Status CommitTree(git_repository* repo, const std::string& location, const std::string& sha,
                  git::Owned<git_tree, git_tree_free>& tree) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  git::Owned<git_commit, git_commit_free> commit;
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
  git::EnsureInit();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Fail(ErrorKind::kNotFound, dir + ": no such directory");
  }
  git_repository* repo = nullptr;
  if (git_repository_open_ext(&repo, dir.c_str(), GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr) != 0) {
    return Fail(ErrorKind::kInvalidArgument, dir + ": not a git repository (" + git::LastError() +
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
  git::Owned<git_status_list, git_status_list_free> list;
  if (git_status_list_new(&list.p, repo_, &opts) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": git status: " + git::LastError());
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
  git::Owned<git_object, git_object_free> obj;
  if (git_revparse_single(&obj.p, repo_, rev.c_str()) != 0) {
    return Fail(ErrorKind::kNotFound,
                location_ + ": unknown revision '" + rev + "' (" + git::LastError() + ")");
  }
  git::Owned<git_object, git_object_free> peeled;
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

Result<std::string> GitRepo::ReadFile(const std::string& sha, const std::string& path) {
  git::Owned<git_tree, git_tree_free> tree;
  TRY(CommitTree(repo_, location_, sha, tree));
  git::Owned<git_tree_entry, git_tree_entry_free> entry;
  if (git_tree_entry_bypath(&entry.p, tree.p, path.c_str()) != 0) {
    return Fail(ErrorKind::kNotFound,
                path + " not found at commit " + sha.substr(0, 12) + " in " + location_);
  }
  if (git_tree_entry_type(entry.p) != GIT_OBJECT_BLOB) {
    return Fail(ErrorKind::kInvalidArgument, path + " is not a file at commit " + sha.substr(0, 12));
  }
  git::Owned<git_blob, git_blob_free> blob;
  if (git_blob_lookup(&blob.p, repo_, git_tree_entry_id(entry.p)) != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": cannot read " + path);
  }
  return std::string(static_cast<const char*>(git_blob_rawcontent(blob.p)),
                     static_cast<size_t>(git_blob_rawsize(blob.p)));
}

Result<std::vector<std::pair<std::string, std::string>>> GitRepo::TreeFiles(const std::string& sha) {
  git::Owned<git_tree, git_tree_free> tree;
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
  git::Owned<git_commit, git_commit_free> commit;
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
  git::Owned<git_index, git_index_free> index;
  if (git_index_new(&index.p) != 0) return Fail(ErrorKind::kInternal, git::LastError());
  opts.baseline_index = index.p;
  if (git_checkout_tree(repo_, reinterpret_cast<git_object*>(commit.p), &opts) != 0) {
    return Fail(ErrorKind::kIo, "checking out " + sha.substr(0, 12) + " into " + target + ": " +
                                    git::LastError());
  }
  return {};
}

Result<std::string> GitRepo::PackCommit(const std::string& sha) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) {
    return Fail(ErrorKind::kInvalidArgument, "invalid commit id '" + sha + "'");
  }
  if (!HasCommit(sha)) return Fail(ErrorKind::kNotFound, location_ + ": no commit " + sha);
  git::Owned<git_packbuilder, git_packbuilder_free> pb;
  if (git_packbuilder_new(&pb.p, repo_) != 0) return Fail(ErrorKind::kInternal, git::LastError());
  // The commit and its whole tree; parents are only named, never sent.
  if (git_packbuilder_insert_commit(pb.p, &oid) != 0) {
    return Fail(ErrorKind::kCorruption, location_ + ": packing " + sha.substr(0, 12) + ": " +
                                            git::LastError());
  }
  git_buf buf = GIT_BUF_INIT;
  if (git_packbuilder_write_buf(&buf, pb.p) != 0) {
    return Fail(ErrorKind::kInternal, location_ + ": packing " + sha.substr(0, 12) + ": " +
                                          git::LastError());
  }
  std::string out(buf.ptr, buf.size);
  git_buf_dispose(&buf);
  return out;
}

bool GitRepo::HasCommit(const std::string& sha) {
  git_oid oid;
  if (git_oid_fromstr(&oid, sha.c_str()) != 0) return false;
  git::Owned<git_commit, git_commit_free> commit;
  return git_commit_lookup(&commit.p, repo_, &oid) == 0;
}

Result<GitRepo> GitRepo::OpenOrInitBare(const std::string& dir) {
  git::EnsureInit();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    git_repository* repo = nullptr;
    if (git_repository_init(&repo, dir.c_str(), /*is_bare=*/1) != 0) {
      return Fail(ErrorKind::kIo, dir + ": cannot create a repository (" + git::LastError() + ")");
    }
    git_repository_free(repo);
  }
  return Open(dir);
}

Status GitRepo::AddPack(std::string_view pack) {
  git::Owned<git_odb, git_odb_free> odb;
  if (git_repository_odb(&odb.p, repo_) != 0) return Fail(ErrorKind::kIo, git::LastError());
  git_odb_writepack* wp = nullptr;
  if (git_odb_write_pack(&wp, odb.p, nullptr, nullptr) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": " + git::LastError());
  }
  git_indexer_progress stats{};
  int rc = wp->append(wp, pack.data(), pack.size(), &stats);
  if (rc == 0) rc = wp->commit(wp, &stats);
  std::string err = rc == 0 ? "" : git::LastError();
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

// History (what a push compares, what a baseline walks).

Result<std::optional<std::string>> GitRepo::ResolveRef(const std::string& ref) {
  git::Owned<git_reference, git_reference_free> r;
  int rc = git_reference_lookup(&r.p, repo_, ref.c_str());
  if (rc == GIT_ENOTFOUND) return std::optional<std::string>();
  if (rc != 0) return Fail(ErrorKind::kIo, location_ + ": " + ref + ": " + git::LastError());
  git::Owned<git_object, git_object_free> obj;
  if (git_reference_peel(&obj.p, r.p, GIT_OBJECT_COMMIT) != 0) return std::optional<std::string>();
  return std::optional<std::string>(git::OidHex(git_object_id(obj.p)));
}

Result<bool> GitRepo::IsAncestor(const std::string& ancestor, const std::string& descendant) {
  ASSIGN_OR_RETURN(auto a, ParseOid(ancestor));
  ASSIGN_OR_RETURN(auto d, ParseOid(descendant));
  if (git_oid_equal(&a, &d)) return true;
  int rc = git_graph_descendant_of(repo_, &d, &a);
  if (rc < 0) return Fail(ErrorKind::kIo, location_ + ": " + git::LastError());
  return rc == 1;
}

Result<std::optional<std::string>> GitRepo::MergeBase(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(auto oa, ParseOid(a));
  ASSIGN_OR_RETURN(auto ob, ParseOid(b));
  git_oid out;
  int rc = git_merge_base(&out, repo_, &oa, &ob);
  if (rc == GIT_ENOTFOUND) return std::optional<std::string>();
  if (rc != 0) return Fail(ErrorKind::kIo, location_ + ": merge base: " + git::LastError());
  return std::optional<std::string>(git::OidHex(&out));
}

Result<std::optional<std::string>> GitRepo::FirstParent(const std::string& sha) {
  ASSIGN_OR_RETURN(auto oid, ParseOid(sha));
  git::Owned<git_commit, git_commit_free> c;
  if (git_commit_lookup(&c.p, repo_, &oid) != 0) {
    return Fail(ErrorKind::kNotFound, location_ + ": no commit " + sha);
  }
  if (git_commit_parentcount(c.p) == 0) return std::optional<std::string>();
  return std::optional<std::string>(git::OidHex(git_commit_parent_id(c.p, 0)));
}

Result<std::vector<std::string>> GitRepo::CommitsBetween(const std::string& base,
                                                        const std::string& head, size_t limit) {
  ASSIGN_OR_RETURN(auto h, ParseOid(head));
  git::Owned<git_revwalk, git_revwalk_free> walk;
  if (git_revwalk_new(&walk.p, repo_) != 0) return Fail(ErrorKind::kIo, git::LastError());
  git_revwalk_sorting(walk.p, GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
  if (git_revwalk_push(walk.p, &h) != 0) {
    return Fail(ErrorKind::kNotFound, location_ + ": no commit " + head);
  }
  if (!base.empty()) {
    ASSIGN_OR_RETURN(auto b, ParseOid(base));
    if (git_revwalk_hide(walk.p, &b) != 0) {
      return Fail(ErrorKind::kNotFound, location_ + ": no commit " + base);
    }
  }
  std::vector<std::string> out;
  git_oid oid;
  while (git_revwalk_next(&oid, walk.p) == 0) out.push_back(git::OidHex(&oid));
  if (out.size() > limit) out.erase(out.begin(), out.end() - static_cast<long>(limit));
  return out;
}

Result<std::vector<ChangedPath>> GitRepo::Diff(const std::string& base, const std::string& sha) {
  auto tree_of = [&](const std::string& s, git_tree** tree) -> Status {
    ASSIGN_OR_RETURN(auto oid, ParseOid(s));
    git::Owned<git_commit, git_commit_free> c;
    if (git_commit_lookup(&c.p, repo_, &oid) != 0) {
      return Fail(ErrorKind::kNotFound, location_ + ": no commit " + s);
    }
    if (git_commit_tree(tree, c.p) != 0) {
      return Fail(ErrorKind::kCorruption, location_ + ": cannot read the tree of " + s);
    }
    return {};
  };
  git::Owned<git_tree, git_tree_free> old_tree, new_tree;
  if (!base.empty()) TRY(tree_of(base, &old_tree.p));
  TRY(tree_of(sha, &new_tree.p));
  git::Owned<git_diff, git_diff_free> diff;
  git_diff_options opts = GIT_DIFF_OPTIONS_INIT;
  if (git_diff_tree_to_tree(&diff.p, repo_, old_tree.p, new_tree.p, &opts) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": diff: " + git::LastError());
  }
  git_diff_find_options find = GIT_DIFF_FIND_OPTIONS_INIT;
  find.flags = GIT_DIFF_FIND_RENAMES;
  if (git_diff_find_similar(diff.p, &find) != 0) {
    return Fail(ErrorKind::kIo, location_ + ": rename detection: " + git::LastError());
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
