#include "cloud/slurm_provider.h"

#include <filesystem>
#include <set>

#include "cloud/run_capture.h"
#include "core/strings.h"

namespace trainq::cloud {

namespace {

bool Transient(const std::string& err) {
  for (const char* s : {"Socket timed out", "Unable to contact", "Zero Bytes were transmitted",
                        "temporarily", "Connection refused", "Resource temporarily unavailable",
                        "try again"}) {
    if (err.find(s) != std::string::npos) return true;
  }
  return false;
}

bool FinalState(const std::string& state) {
  static const std::set<std::string> kFinal = {
      "COMPLETED", "CANCELLED", "FAILED",     "TIMEOUT",       "PREEMPTED", "NODE_FAIL",
      "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"};
  return kFinal.count(state) > 0;
}

bool ValidJobId(const std::string& id) {
  if (id.empty()) return false;
  for (char c : id) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

SlurmProvider::SlurmProvider(ProcessRunner* runner, std::map<std::string, std::string> params,
                             std::string scratch_dir)
    : runner_(runner), params_(std::move(params)), scratch_dir_(std::move(scratch_dir)) {
  if (auto t = Param("timeout"); !t.empty()) {
    if (auto s = ParseDurationSeconds(t)) timeout_ms_ = *s * 1000;
  }
}

std::string SlurmProvider::Param(const std::string& key) const {
  auto it = params_.find(key);
  return it == params_.end() ? "" : it->second;
}

std::string SlurmProvider::Comment(const MachineTag& tag) {
  return "trainq:" + tag.instance + ":" + tag.pool;
}

Result<std::string> SlurmProvider::Run(const std::string& what, std::vector<std::string> argv) {
  if (auto bin = Param("bin_dir"); !bin.empty()) {
    argv[0] = (std::filesystem::path(bin) / argv[0]).string();
  }
  ProcessSpec spec;
  spec.argv = argv;
  if (auto conf = Param("slurm_conf"); !conf.empty()) spec.env["SLURM_CONF"] = conf;
  auto out = RunCapture(*runner_, spec, timeout_ms_, scratch_dir_);
  if (!out) return std::unexpected(out.error().Wrap("slurm: " + what));
  if (!out->status.ok()) {
    std::string err = Tail(out->err.empty() ? out->out : out->err);
    return Fail(Transient(err) ? ErrorKind::kUnavailable : ErrorKind::kInvalidArgument,
                "slurm: " + what + ": " + argv[0] + " failed (" + out->status.Describe() +
                    "): " + err);
  }
  return out->out;
}

Result<std::string> SlurmProvider::Boot(const BootSpec& spec) {
  if (spec.worker_argv.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "slurm: boot: no worker command");
  }
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + spec.name,
                                   "--comment=" + Comment(spec.tag)};
  auto add = [&](const char* param, const char* flag) {
    if (auto v = Param(param); !v.empty()) argv.push_back(std::string(flag) + "=" + v);
  };
  add("partition", "--partition");
  add("account", "--account");
  add("gres", "--gres");
  add("cpus", "--cpus-per-task");
  add("time", "--time");
  add("output", "--output");
  for (const auto& a : Split(Param("extra_args"), ' ')) {
    if (!a.empty()) argv.push_back(a);
  }
  std::string command = "exec";
  for (const auto& a : spec.worker_argv) command += " " + ShellQuote(a);
  argv.push_back("--wrap");
  argv.push_back(command);
  ASSIGN_OR_RETURN(auto out, Run("boot " + spec.name, argv));
  // --parsable: "jobid" or "jobid;cluster".
  std::string id;
  for (const auto& line : Split(out, '\n')) {
    auto t = std::string(Trim(line));
    if (!t.empty()) id = t;
  }
  id = id.substr(0, id.find(';'));
  if (!ValidJobId(id)) {
    return Fail(ErrorKind::kInternal,
                "slurm: boot " + spec.name + ": sbatch printed no job id: " + Tail(out));
  }
  return id;
}

Result<std::vector<ListedMachine>> SlurmProvider::List(const MachineTag& tag) {
  ASSIGN_OR_RETURN(auto out, Run("list", {"squeue", "--me", "--noheader", "--format=%i|%j|%k|%T"}));
  std::string comment = Comment(tag);
  std::vector<ListedMachine> machines;
  for (const auto& line : Split(out, '\n')) {
    auto fields = Split(Trim(line), '|');
    if (fields.size() < 4) continue;
    std::string state(Trim(fields.back()));
    std::string job_comment(Trim(fields[fields.size() - 2]));
    std::string id(Trim(fields[0]));
    // The name is everything between the id and the comment.
    std::string name;
    for (size_t i = 1; i + 2 < fields.size(); ++i) name += (i > 1 ? "|" : "") + fields[i];
    if (job_comment != comment || FinalState(state)) continue;
    machines.push_back(ListedMachine{id, tag, name});
  }
  return machines;
}

Status SlurmProvider::Stop(const std::string& id) {
  if (!ValidJobId(id)) {
    return Fail(ErrorKind::kInvalidArgument, "slurm: stop: '" + id + "' is not a Slurm job id");
  }
  auto out = Run("stop " + id, {"scancel", id});
  if (!out) {
    if (out.error().message.find("Invalid job id") != std::string::npos) return {};
    return std::unexpected(out.error());
  }
  return {};
}

Result<std::string> SlurmProvider::LogTail(const std::string& id, const std::string& name,
                                           std::size_t max_bytes) {
  if (!ValidJobId(id)) return Fail(ErrorKind::kNotFound, "slurm: no job id");
  std::string pattern = Param("output");
  if (pattern.empty()) pattern = "slurm-%j.out";
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      path += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == 'j' || c == 'A') {
      path += id;
    } else if (c == 'x') {
      path += name;
    } else if (c == '%') {
      path += '%';
    } else {
      return Fail(ErrorKind::kNotFound, "slurm: output pattern %" + std::string(1, c) +
                                            " is not one trainq can follow");
    }
  }
  return FileTail(path, max_bytes);
}

}  // namespace trainq::cloud
