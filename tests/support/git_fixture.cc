#include "tests/support/git_fixture.h"

#include <git2.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace trainq::testing {

namespace {

void Check(int rc, const char* what) {
  if (rc < 0) {
    const git_error* e = git_error_last();
    throw std::runtime_error(std::string(what) + ": " + (e ? e->message : "unknown"));
  }
}

}  // namespace

GitFixture::GitFixture(std::string dir) : dir_(std::move(dir)) {
  git_libgit2_init();
  std::filesystem::create_directories(dir_);
  git_repository* repo = nullptr;
  Check(git_repository_init(&repo, dir_.c_str(), 0), "git init");
  repo_ = repo;
}

GitFixture::~GitFixture() {
  git_repository_free(static_cast<git_repository*>(repo_));
  git_libgit2_shutdown();
}

std::string GitFixture::Commit(const std::map<std::string, std::string>& files,
                               const std::string& message) {
  auto* repo = static_cast<git_repository*>(repo_);
  for (const auto& [path, contents] : files) {
    auto full = std::filesystem::path(dir_) / path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full, std::ios::binary | std::ios::trunc) << contents;
  }
  git_index* index = nullptr;
  Check(git_repository_index(&index, repo), "index");
  git_strarray all{};
  char star[] = "*";
  char* paths[] = {star};
  all.strings = paths;
  all.count = 1;
  Check(git_index_add_all(index, &all, GIT_INDEX_ADD_DEFAULT, nullptr, nullptr), "add");
  Check(git_index_write(index), "index write");
  git_oid tree_id;
  Check(git_index_write_tree(&tree_id, index), "write tree");
  git_index_free(index);
  git_tree* tree = nullptr;
  Check(git_tree_lookup(&tree, repo, &tree_id), "tree lookup");
  git_signature* sig = nullptr;
  Check(git_signature_new(&sig, "Test", "test@example.com", 1700000000, 0), "signature");
  git_oid parent_id;
  git_commit* parent = nullptr;
  int parents = 0;
  if (git_reference_name_to_id(&parent_id, repo, "HEAD") == 0) {
    Check(git_commit_lookup(&parent, repo, &parent_id), "parent");
    parents = 1;
  }
  const git_commit* parent_list[] = {parent};
  git_oid commit_id;
  Check(git_commit_create(&commit_id, repo, "HEAD", sig, sig, nullptr, message.c_str(), tree,
                          parents, parents ? parent_list : nullptr),
        "commit");
  git_commit_free(parent);
  git_signature_free(sig);
  git_tree_free(tree);
  char sha[GIT_OID_HEXSZ + 1];
  git_oid_tostr(sha, sizeof sha, &commit_id);
  return sha;
}

}  // namespace trainq::testing
