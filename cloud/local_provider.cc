#include "cloud/local_provider.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/fatal_signals.h"
#include "core/strings.h"

namespace trainq::cloud {

namespace fs = std::filesystem;

struct LocalProvider::Record {
  std::string file;
  int pid = 0;
  std::int64_t start = -1;
  MachineTag tag;
  std::string name;
  TimeMs started = 0;
  TimeMs kill_at = 0;  // > 0: SIGTERM sent, SIGKILL due then
};

namespace {

struct ProcStat {
  char state = '?';
  std::int64_t start = -1;
};

std::optional<ProcStat> ReadProcStat(int pid) {
  if (pid <= 0) return std::nullopt;
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses; fields
  // resume after the last ')'.
  auto close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return std::nullopt;
  std::vector<std::string> fields;
  for (auto& f : Split(std::string_view(*text).substr(close + 2), ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  ProcStat st;
  st.state = fields[0][0];
  try {
    st.start = std::stoll(fields[19]);
  } catch (...) {
    return std::nullopt;
  }
  return st;
}

bool Dead(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

}  // namespace

std::int64_t ProcessStartTime(int pid) {
  auto st = ReadProcStat(pid);
  if (!st || Dead(st->state)) return -1;
  return st->start;
}

LocalProvider::LocalProvider(ProcessRunner* runner, const Clock* clock, std::string state_dir,
                             TimeMs stop_grace_ms, TimeMs stop_wait_ms)
    : runner_(runner),
      clock_(clock),
      dir_((fs::path(state_dir) / "local").string()),
      stop_grace_ms_(stop_grace_ms),
      stop_wait_ms_(stop_wait_ms) {}

Result<std::string> LocalProvider::Boot(const BootSpec& spec) {
  if (spec.worker_argv.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "local: boot: no worker command");
  }
  if (spec.name.empty() || spec.name.find('/') != std::string::npos || spec.name[0] == '.') {
    return Fail(ErrorKind::kInvalidArgument, "local: boot: bad machine name '" + spec.name + "'");
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Fail(ErrorKind::kIo, "local: cannot create " + dir_ + ": " + ec.message());
  std::string json_path = (fs::path(dir_) / (spec.name + ".json")).string();
  if (fs::exists(json_path)) {
    return Fail(ErrorKind::kConflict, "local: a machine named " + spec.name + " exists already");
  }
  ProcessSpec ps;
  ps.argv = spec.worker_argv;
  ps.inherit_env = false;
  ps.pass_env = spec.env_passthrough;
  // Everything the worker needs is on its command line.
  ps.output_path = (fs::path(dir_) / (spec.name + ".log")).string();
  auto pid = runner_->Spawn(ps);
  if (!pid) return std::unexpected(pid.error().Wrap("local: boot " + spec.name));
  StopOnCrash(*pid);  // a serve that crashes takes its workers with it
  auto stat = ReadProcStat(*pid);  // a worker that ended at once is a zombie: still readable
  std::int64_t start = stat ? stat->start : -1;
  nlohmann::json j = {{"pid", *pid},          {"start", start},
                      {"pool", spec.tag.pool}, {"instance", spec.tag.instance},
                      {"name", spec.name},     {"started", clock_->Now()}};
  std::string tmp = json_path + ".tmp";
  auto written = WriteFile(tmp, j.dump() + "\n");
  if (written) {
    fs::rename(tmp, json_path, ec);
    if (ec) written = Fail(ErrorKind::kIo, "cannot rename " + tmp + ": " + ec.message());
  }
  if (!written) {
    // Without its record the machine could never be found again: undo.
    runner_->KillGroup(*pid, SIGKILL);
    runner_->Wait(*pid);
    ForgetStopOnCrash(*pid);
    return std::unexpected(written.error().Wrap("local: boot " + spec.name));
  }
  return std::to_string(*pid);
}

Result<std::vector<LocalProvider::Record>> LocalProvider::Load() {
  std::vector<Record> out;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    auto text = ReadFile(entry.path().string());
    if (!text) continue;  // removed meanwhile
    Record r;
    r.file = entry.path().string();
    try {
      auto j = nlohmann::json::parse(*text);
      r.pid = j.at("pid").get<int>();
      r.start = j.value("start", std::int64_t{-1});
      r.tag.pool = j.at("pool").get<std::string>();
      r.tag.instance = j.at("instance").get<std::string>();
      r.name = j.value("name", "");
      r.started = j.value("started", TimeMs{0});
      r.kill_at = j.value("kill_at", TimeMs{0});
    } catch (const std::exception&) {
      continue;  // not ours, or half-written by something else
    }
    out.push_back(std::move(r));
  }
  if (ec) return Fail(ErrorKind::kIo, "local: cannot list " + dir_ + ": " + ec.message());
  return out;
}

bool LocalProvider::Alive(const Record& r) {
  // Only the process recorded at boot (same pid and start time) is the
  // machine: a reused pid belongs to someone else and is neither signalled
  // nor reaped here (it could be another of this server's children).
  auto st = ReadProcStat(r.pid);
  if (!st || r.start < 0 || st->start != r.start) return false;
  if (Dead(st->state)) {
    runner_->Poll(r.pid);  // reaps it when it is our child
    return false;
  }
  return true;
}

void LocalProvider::Sweep(std::vector<Record>& records) {
  TimeMs now = clock_->Now();
  std::erase_if(records, [&](const Record& r) {
    if (r.kill_at == 0) return false;
    if (!Alive(r)) {
      ForgetStopOnCrash(r.pid);
      fs::remove(r.file);
      return true;
    }
    if (now >= r.kill_at) {
      ForgetStopOnCrash(r.pid);
      runner_->KillGroup(r.pid, SIGKILL);
      // Dies at once; reap it so that no zombie is left behind (bounded).
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (Alive(r) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      fs::remove(r.file);
      return true;
    }
    return false;
  });
}

Result<std::vector<ListedMachine>> LocalProvider::List(const MachineTag& tag) {
  ASSIGN_OR_RETURN(auto records, Load());
  Sweep(records);
  std::vector<ListedMachine> out;
  for (const auto& r : records) {
    if (r.kill_at != 0 || !(r.tag == tag)) continue;
    if (!Alive(r)) {
      ForgetStopOnCrash(r.pid);
      std::error_code ec;
      fs::remove(r.file, ec);
      continue;
    }
    // One an earlier serve started is this serve's now: stopped with it if
    // it crashes.
    StopOnCrash(r.pid);
    out.push_back(ListedMachine{std::to_string(r.pid), r.tag, r.name});
  }
  return out;
}

Status LocalProvider::Stop(const std::string& id) {
  ASSIGN_OR_RETURN(auto records, Load());
  Sweep(records);
  for (auto& r : records) {
    if (std::to_string(r.pid) != id || r.kill_at != 0) continue;
    std::error_code ec;
    if (!Alive(r)) {
      ForgetStopOnCrash(r.pid);
      fs::remove(r.file, ec);
      return {};
    }
    runner_->KillGroup(r.pid, SIGTERM);
    // A worker stopped with SIGSTOP (the fleet found it silent: lost) acts on
    // the SIGTERM only once it runs again.
    runner_->KillGroup(r.pid, SIGCONT);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(stop_wait_ms_);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!Alive(r)) {
        ForgetStopOnCrash(r.pid);
        fs::remove(r.file, ec);
        return {};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Still shutting down: finish on a later call, without blocking this one.
    r.kill_at = clock_->Now() + stop_grace_ms_;
    nlohmann::json j = {{"pid", r.pid},          {"start", r.start},   {"pool", r.tag.pool},
                        {"instance", r.tag.instance}, {"name", r.name}, {"started", r.started},
                        {"kill_at", r.kill_at}};
    TRY(WriteFile(r.file + ".tmp", j.dump() + "\n"));
    fs::rename(r.file + ".tmp", r.file, ec);
    if (ec) return Fail(ErrorKind::kIo, "local: stop " + id + ": " + ec.message());
    return {};
  }
  return {};  // unknown or already gone
}

Result<std::string> LocalProvider::LogTail(const std::string&, const std::string& name,
                                           std::size_t max_bytes) {
  if (name.empty() || name.find('/') != std::string::npos) {
    return Fail(ErrorKind::kNotFound, "local: no log without the machine's name");
  }
  return FileTail((fs::path(dir_) / (name + ".log")).string(), max_bytes);
}

}  // namespace trainq::cloud
