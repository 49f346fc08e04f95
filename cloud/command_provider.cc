#include "cloud/command_provider.h"

#include <cctype>

#include "cloud/run_capture.h"
#include "core/strings.h"

namespace trainq::cloud {

namespace {

bool Word(const std::string& s, std::string_view extra) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && extra.find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> Fields(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == '\t') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

}  // namespace

CommandProvider::CommandProvider(ProcessRunner* runner, std::map<std::string, std::string> params,
                                 std::string scratch_dir)
    : runner_(runner), params_(std::move(params)), scratch_dir_(std::move(scratch_dir)) {
  if (auto it = params_.find("timeout"); it != params_.end()) {
    if (auto s = ParseDurationSeconds(it->second)) timeout_ms_ = *s * 1000;
  }
}

Result<std::string> CommandProvider::Run(const std::string& what, const std::string& templ,
                                         const std::map<std::string, std::string>& vars,
                                         std::map<std::string, std::string> env) {
  for (const auto& [k, v] : vars) {
    std::string name = "TRAINQ_";
    for (char c : k) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    env[name] = v;
  }
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", Substitute(templ, vars)};
  spec.env = std::move(env);
  auto out = RunCapture(*runner_, spec, timeout_ms_, scratch_dir_);
  if (!out) return std::unexpected(out.error().Wrap("command provider: " + what));
  if (!out->status.ok()) {
    int code = out->status.code;
    bool permanent = out->status.signal == 0 && code >= 64 && code <= 78 && code != 75;
    std::string err = Tail(out->err.empty() ? out->out : out->err);
    return Fail(permanent ? ErrorKind::kInvalidArgument : ErrorKind::kUnavailable,
                "command provider: " + what + " command failed (" + out->status.Describe() +
                    ")" + (err.empty() ? "" : ": " + err));
  }
  return out->out;
}

Result<std::string> CommandProvider::Boot(const BootSpec& spec) {
  for (const auto* s : {&spec.name, &spec.tag.pool, &spec.tag.instance}) {
    if (!Word(*s, "._-")) {
      return Fail(ErrorKind::kInvalidArgument,
                  "command provider: boot: '" + *s + "' is not a plain word");
    }
  }
  std::string worker;
  for (const auto& a : spec.worker_argv) worker += (worker.empty() ? "" : " ") + ShellQuote(a);
  std::map<std::string, std::string> vars = {
      {"name", spec.name},        {"pool", spec.tag.pool},
      {"instance", spec.tag.instance}, {"slots", std::to_string(spec.slots)},
      {"gpus", std::to_string(spec.gpus)}, {"worker_command", worker}};
  std::map<std::string, std::string> env;
  if (!spec.token.empty()) env["TRAINQ_TOKEN"] = spec.token;
  ASSIGN_OR_RETURN(auto out, Run("boot " + spec.name, params_.at("boot"), vars, env));
  std::string id;
  for (const auto& line : Split(out, '\n')) {
    auto t = std::string(Trim(line));
    if (!t.empty()) id = t;
  }
  if (id.empty()) {
    return Fail(ErrorKind::kInternal,
                "command provider: boot " + spec.name + ": the boot command printed no id");
  }
  if (!Word(id, "._:/@-")) {
    return Fail(ErrorKind::kInternal, "command provider: boot " + spec.name +
                                          ": the id printed last is not one word: " + Tail(id, 100));
  }
  return id;
}

Result<std::vector<ListedMachine>> CommandProvider::List(const MachineTag& tag) {
  std::map<std::string, std::string> vars = {{"pool", tag.pool}, {"instance", tag.instance}};
  ASSIGN_OR_RETURN(auto out, Run("list", params_.at("list"), vars, {}));
  std::vector<ListedMachine> machines;
  int n = 0;
  for (const auto& line : Split(out, '\n')) {
    ++n;
    auto t = Trim(line);
    if (t.empty() || t.front() == '#') continue;
    auto f = Fields(t);
    if (f.size() == 4) {
      if (f[2] != tag.pool || f[3] != tag.instance) continue;
    } else if (f.size() > 2) {
      return Fail(ErrorKind::kInvalidArgument,
                  "command provider: list: output line " + std::to_string(n) +
                      " has " + std::to_string(f.size()) +
                      " fields; expected \"ID NAME POOL INSTANCE\" or \"ID [NAME]\": " +
                      Tail(std::string(t), 200));
    }
    machines.push_back(ListedMachine{f[0], tag, f.size() >= 2 ? f[1] : ""});
  }
  return machines;
}

Status CommandProvider::Stop(const std::string& id) {
  if (!Word(id, "._:/@-")) {
    return Fail(ErrorKind::kInvalidArgument, "command provider: stop: bad id '" + id + "'");
  }
  TRY(Run("stop " + id, params_.at("stop"), {{"id", id}}, {}));
  return {};
}

}  // namespace trainq::cloud
