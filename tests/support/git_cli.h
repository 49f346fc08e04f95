// Drives the git command line for tests that need branches, force pushes,
// bare remotes and hooks (tests/support/git_fixture.h covers plain commits).
// Every command that fails throws, with its output, so the test fails.
#pragma once

#include <map>
#include <string>

namespace trainq::testing {

class GitCli {
 public:
  // A work tree at `dir`: `git init -b main` unless it exists already.
  explicit GitCli(std::string dir);
  // Creates a bare repository at `dir` (default branch main).
  static void InitBare(const std::string& dir);

  // Runs `git ARGS` in the work tree; returns stdout+stderr, trimmed.
  std::string Run(const std::string& args) const;
  // Writes the files, stages everything (deletions too) and commits.
  std::string Commit(const std::map<std::string, std::string>& files, const std::string& message);
  std::string Head() const { return Run("rev-parse HEAD"); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace trainq::testing
