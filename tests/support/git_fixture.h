// Builds real git repositories with libgit2 for tests.
#pragma once

#include <map>
#include <string>

namespace trainq::testing {

class GitFixture {
 public:
  // Creates an empty non-bare repository at `dir`.
  explicit GitFixture(std::string dir);
  ~GitFixture();
  GitFixture(const GitFixture&) = delete;
  GitFixture& operator=(const GitFixture&) = delete;

  // Writes the files (path -> contents; an empty optional removes... not supported),
  // stages everything and commits on HEAD. Returns the new commit's sha.
  std::string Commit(const std::map<std::string, std::string>& files, const std::string& message);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  void* repo_ = nullptr;  // git_repository*
};

}  // namespace trainq::testing
