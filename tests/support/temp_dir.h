// A temporary directory removed at the end of the test, and a condition wait.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace trainq::testing {

class TempDir {
 public:
  TempDir();
  // Under `base` instead of $TMPDIR or /tmp (a sandbox test needs a
  // directory outside the /tmp that the sandbox replaces).
  explicit TempDir(const std::filesystem::path& base);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Polls `condition` until it holds or `deadline` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds deadline = std::chrono::seconds(30));

// Runs a shell command, returns its exit code and (via *output) its stdout+stderr.
int RunShell(const std::string& command, std::string* output = nullptr);

}  // namespace trainq::testing
