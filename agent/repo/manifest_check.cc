#include "agent/repo/manifest_check.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/process.h"
#include "core/strings.h"
#include "trainer/spec.h"
#include "trainer/spec_tree.h"

namespace trainq {

namespace {

namespace fs = std::filesystem;

std::string Where(std::string_view filename, int line, const std::string& key) {
  std::string out(filename);
  if (line > 0) out += ":" + std::to_string(line);
  return out + ": " + key + ": ";
}

// What `sh -n` says about `command` (placeholders filled with sample
// values), or nothing when the syntax is fine.
Result<std::optional<std::string>> ShellSyntaxError(const std::string& command) {
  std::string sample = Substitute(command, {{"seed", "1"},
                                            {"repeat", "1"},
                                            {"run_id", "1"},
                                            {"output_dir", "/tmp/trainq-output"}});
  char tmpl[] = "/tmp/trainq-sh-n-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return Fail(ErrorKind::kIo, std::string("mkstemp: ") + std::strerror(errno));
  ::close(fd);
  std::string out_path = tmpl;
  PosixProcessRunner runner;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-n", "-c", sample};
  spec.output_path = out_path;
  auto pid = runner.Spawn(spec);
  if (!pid) {
    std::remove(out_path.c_str());
    return std::unexpected(pid.error());
  }
  ExitStatus st = runner.Wait(*pid);
  auto text = ReadFile(out_path);
  std::remove(out_path.c_str());
  if (st.ok()) return std::optional<std::string>();
  std::string msg = text ? std::string(Trim(*text)) : "";
  // dash: "sh: 1: Syntax error: Unterminated quoted string"
  if (msg.starts_with("/bin/sh: ")) msg = msg.substr(9);
  if (msg.starts_with("sh: ")) msg = msg.substr(4);
  if (msg.empty()) msg = st.Describe();
  return std::optional<std::string>("shell syntax error (sh -n): " + msg);
}

}  // namespace

Status CheckExperiments(const std::vector<const Experiment*>& experiments,
                        std::string_view filename, const CommitFileReader& read) {
  for (const Experiment* e : experiments) {
    const std::string path = "experiments." + e->name;
    if (!e->trainer.empty()) {
      std::string spec_path = fs::path(e->trainer).lexically_normal().string();
      std::string where = Where(filename, e->trainer_line ? e->trainer_line : e->line,
                                path + ".trainer");
      if (fs::path(e->trainer).is_absolute() || spec_path.starts_with("..")) {
        return Fail(ErrorKind::kInvalidArgument,
                    where + e->trainer + ": a spec path is relative to the repository root");
      }
      auto top = read(spec_path);
      if (!top) {
        if (top.error().kind == ErrorKind::kNotFound) {
          return Fail(ErrorKind::kInvalidArgument, where + e->trainer + " not found");
        }
        return std::unexpected(top.error());
      }
      auto tree = trainer::LoadSpecTree(spec_path, read);
      if (!tree) return Fail(ErrorKind::kInvalidArgument, where + tree.error().message);
      auto spec = trainer::ParseSpec(*tree, spec_path);
      if (!spec) return Fail(ErrorKind::kInvalidArgument, where + spec.error().message);
    } else {
      ASSIGN_OR_RETURN(auto bad, ShellSyntaxError(e->command));
      if (bad) {
        return Fail(ErrorKind::kInvalidArgument,
                    Where(filename, e->command_line ? e->command_line : e->line,
                          path + ".command") +
                        *bad);
      }
    }
  }
  return {};
}

Status CheckManifestSize(std::size_t bytes, std::string_view filename,
                         const SubmitLimits& limits) {
  if (bytes <= limits.max_manifest_bytes) return {};
  return Fail(ErrorKind::kInvalidArgument,
              std::string(filename) + ": " + std::to_string(bytes) + " bytes, more than the " +
                  std::to_string(limits.max_manifest_bytes) + " allowed");
}

Status CheckSubmitLimits(const std::vector<BatchSpec>& specs, const std::string& where,
                         const SubmitLimits& limits) {
  if (specs.size() > static_cast<std::size_t>(limits.max_experiments)) {
    return Fail(ErrorKind::kInvalidArgument,
                where + ": " + std::to_string(specs.size()) + " experiments in one submission, " +
                    "more than the limit of " + std::to_string(limits.max_experiments) +
                    " (--max-experiments, or limits.experiments in server.yaml); nothing queued");
  }
  std::int64_t runs = 0;
  for (const auto& s : specs) runs += s.repeats;
  if (runs > limits.max_runs) {
    return Fail(ErrorKind::kInvalidArgument,
                where + ": " + std::to_string(runs) + " runs in one submission, more than the " +
                    "limit of " + std::to_string(limits.max_runs) +
                    " (--max-runs, or limits.runs in server.yaml); nothing queued");
  }
  return {};
}

}  // namespace trainq
