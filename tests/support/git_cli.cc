#include "tests/support/git_cli.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing {

namespace {

// Identity and defaults fixed here, so the user's ~/.gitconfig does not matter.
const char* kGit =
    "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c user.name=Test "
    "-c user.email=test@example.com -c init.defaultBranch=main -c commit.gpgsign=false "
    "-c protocol.file.allow=always";

std::string Checked(const std::string& cmd) {
  std::string out;
  int rc = RunShell(cmd, &out);
  if (rc != 0) throw std::runtime_error(cmd + " -> exit " + std::to_string(rc) + ":\n" + out);
  return std::string(Trim(out));
}

}  // namespace

GitCli::GitCli(std::string dir) : dir_(std::move(dir)) {
  if (!std::filesystem::exists(std::filesystem::path(dir_) / ".git")) {
    std::filesystem::create_directories(dir_);
    Checked(std::string(kGit) + " init -q " + ShellQuote(dir_));
  }
}

void GitCli::InitBare(const std::string& dir) {
  Checked(std::string(kGit) + " init -q --bare " + ShellQuote(dir));
}

std::string GitCli::Run(const std::string& args) const {
  return Checked(std::string(kGit) + " -C " + ShellQuote(dir_) + " " + args);
}

std::string GitCli::Commit(const std::map<std::string, std::string>& files,
                           const std::string& message) {
  for (const auto& [path, contents] : files) {
    auto full = std::filesystem::path(dir_) / path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full, std::ios::binary | std::ios::trunc) << contents;
  }
  Run("add -A");
  Run("commit -q --allow-empty -m " + ShellQuote(message));
  return Head();
}

}  // namespace trainq::testing
