// Fleet's boots: Boot (the rows, then the calls to the boot threads), the
// worker's argv, recording the answers (HarvestBoots) and judging each
// machine's boot (JudgeBoots: the pool's boot health, back-off, `failing`).
// The boot threads themselves are in fleet_internal.h.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/daemon/fleet.h"
#include "agent/daemon/fleet_internal.h"
#include "agent/daemon/worker_api.h"
#include "core/strings.h"
#include "queue/machines.h"

namespace trainq {

namespace fs = std::filesystem;

using fleet_internal::ToMachine;

namespace {

// The log tail, indented, for the serve log.
std::string Indent(const std::string& text) {
  std::string out;
  for (const auto& line : Split(text, '\n')) {
    if (!Trim(line).empty()) out += "\n    | " + std::string(line);
  }
  return out;
}

std::string Base36(TimeMs v) {
  std::string s;
  auto u = static_cast<std::uint64_t>(v);
  do {
    s.insert(s.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[u % 36]);
    u /= 36;
  } while (u);
  return s;
}

}  // namespace

bool Fleet::AwaitBoots(TimeMs wait_ms) {
  return boots_->WaitIdle(std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms));
}

Result<bool> Fleet::SettleBoots(TimeMs wait_ms) {
  const bool idle = AwaitBoots(wait_ms);
  TRY(HarvestBoots());
  return idle;
}

int Fleet::BootsPending() const { return boots_ ? boots_->Pending() : 0; }

Status Fleet::HarvestBoots() {
  auto done = boots_->TakeDone();
  // Successes first: a failure among them leaves the pool backing off, as
  // a failed boot ended a pass's boots when they were synchronous.
  std::stable_partition(done.begin(), done.end(),
                        [](const BootJob& j) { return j.result.has_value(); });
  // Machines to stop: booted after they were given up.
  std::vector<std::pair<std::string, std::string>> stop;  // pool, provider id
  // One write transaction per 500 boots (not one each: 10,000 boots are
  // 10,000 commits), short enough not to hold up the other writers.
  constexpr std::size_t kChunk = 500;
  Status first;
  std::vector<BootJob> unrecorded;
  for (std::size_t at = 0; at < done.size(); at += kChunk) {
    const std::size_t stops_before = stop.size();
    auto st = store_.InWriteTransaction([&]() -> Status {
      for (std::size_t i = at; i < std::min(done.size(), at + kChunk); ++i) {
        if (auto r = RecordBoot(done[i], stop); !r) {
          // The store cannot write now (a full disk): the chunk rolls back
          // and is recorded next pass, rather than its machines stopped.
          if (r.error().kind == ErrorKind::kUnavailable) return r;
          spdlog::warn("pool {}: recording the boot of {}: {}", done[i].pool, done[i].spec.name,
                       r.error().message);
        }
      }
      return {};
    });
    if (!st) {
      // Not committed (a full disk): nothing of the chunk is in the store.
      // Its boots stay finished-but-unrecorded (their machines hidden from
      // reconcile, not stopped as unknown) and are recorded next pass.
      spdlog::warn("fleet: recording {} finished boot(s) failed: {} (tried again next pass)",
                   std::min(done.size(), at + kChunk) - at, st.error().message);
      stop.resize(stops_before);
      for (std::size_t i = at; i < std::min(done.size(), at + kChunk); ++i) {
        unrecorded.push_back(std::move(done[i]));
      }
      if (first) first = st;
    }
  }
  if (!unrecorded.empty()) boots_->PutBack(std::move(unrecorded));
  // The provider is called outside the transactions.
  for (const auto& [name, id] : stop) {
    FleetPool* pool = FindPool(name);
    if (!pool) continue;
    CallStop(*pool, id, "", " (tried again while it is listed)");
  }
  return first;
}

Status Fleet::RecordBoot(BootJob& job, std::vector<std::pair<std::string, std::string>>& stop) {
  const std::string& name = job.spec.name;
  if (!job.result) {
    // A boot the provider refused (a boot command that failed, an API that
    // said no) is a failed boot, as one whose machine never registers: the
    // next JudgeBoots counts it in the pool's boot record, whatever the
    // provider, so the back-off grows and the pool turns failing after
    // failing_after. (Counted as a failed provider call instead, as it was,
    // it was cleared by the next List that worked, and never passed 1.)
    const std::string& why = job.result.error().message;
    watched_.insert(job.row);
    judged_.erase(job.row);
    stop_reason_[job.row] = why;
    spdlog::warn("pool {}: boot of {} failed: {}", job.pool, name, why);
    given_up_.erase(job.row);
    auto st = store_.machines().SetMachineState(job.row, "failed", clock_.Now(), "boot: " + why);
    // Backoff; the next pass after it boots again.
    auto off = CallOffBoots(job.pool, "never booted: an earlier boot of the pool failed (" +
                                          why + "); booted again after the backoff");
    return st ? off : st;
  }
  Record(job.pool, true, "");
  const std::string& id = *job.result;
  auto st = store_.machines().SetMachineProviderId(job.row, id, clock_.Now());
  if (given_up_.erase(job.row) > 0 || !st) {
    // Forgotten or stopped meanwhile (the row keeps its state), or not
    // recordable: nobody will use it.
    spdlog::warn("pool {}: boot of {} answered ({}) after it was given up{}; stopping it",
                 job.pool, name, id, st ? "" : " (" + st.error().message + ")");
    stop.emplace_back(job.pool, id);
    return st;
  }
  FleetPool* pool = FindPool(job.pool);
  spdlog::info("pool {}: booted {} ({} {})", job.pool, name, pool ? pool->spec.provider : "", id);
  return Status{};
}

Status Fleet::CallOffBoots(const std::string& pool, const std::string& why) {
  Status first;
  for (auto& job : boots_->TakeQueued(pool)) {
    watched_.erase(job.row);
    judged_.insert(job.row);
    // Stopped with the reason as its last error (`trainq machines`).
    auto st = store_.machines().ForgetMachine(job.row, clock_.Now(), why);
    if (!st && first) first = std::unexpected(st.error());
  }
  return first;
}

void Fleet::HideBooting(FleetPool& pool, const std::vector<MachineRow>& machines,
                        std::vector<cloud::ListedMachine>& listing) const {
  auto names = boots_->Names(pool.spec.name());
  if (names.empty()) return;
  std::set<std::string> known;
  for (const auto& m : machines) {
    if (m.pool == pool.spec.name() && !m.provider_id.empty()) known.insert(m.provider_id);
  }
  std::erase_if(listing, [&](const cloud::ListedMachine& l) {
    return !known.contains(l.id) && (l.name.empty() || names.contains(l.name));
  });
}

Status Fleet::JudgeBoots(const std::vector<MachineRow>& live,
                         std::map<std::string, Machines::PoolStateRow>& states) {
  const TimeMs now = clock_.Now();
  std::map<std::int64_t, const MachineRow*> live_rows;
  for (const auto& m : live) {
    if (!FindPool(m.pool) || m.state == "stopped" || m.state == "failed") continue;
    live_rows[m.id] = &m;
    if (!judged_.count(m.id)) watched_.insert(m.id);
  }
  for (auto it = watched_.begin(); it != watched_.end();) {
    const std::int64_t row = *it;
    MachineRow m;
    if (auto l = live_rows.find(row); l != live_rows.end()) {
      m = *l->second;
    } else {
      ASSIGN_OR_RETURN(auto found, store_.machines().Machine(row));
      if (!found) {
        it = watched_.erase(it);
        continue;
      }
      m = *found;
      if (!m.stopped_ms) m.stopped_ms = now;  // left the live set: it ended
    }
    auto outcome = cloud::JudgeBoot(ToMachine(m), now, options_.autoscaler);
    if (outcome == cloud::BootOutcome::kUndecided) {
      ++it;
      continue;
    }
    it = watched_.erase(it);
    judged_.insert(row);
    const bool on_purpose = deliberate_.erase(row) > 0;
    if (outcome == cloud::BootOutcome::kFailed && on_purpose) continue;
    TRY(RecordBootOutcome(m, outcome == cloud::BootOutcome::kSucceeded, states));
    stop_reason_.erase(row);
  }
  return Status{};
}

Status Fleet::RecordBootOutcome(const MachineRow& m, bool ok,
                                std::map<std::string, Machines::PoolStateRow>& states) {
  const TimeMs now = clock_.Now();
  Machines::PoolStateRow& row = states[m.pool];
  row.pool = m.pool;
  cloud::BootHealth h{row.failed_boots, row.next_boot_ms, row.failing};
  FleetPool* pool = FindPool(m.pool);
  if (pool) row.config_hash = PoolConfigHash(pool->spec, options_.server_url);
  if (ok) {
    if (h.failed == 0 && !h.failing) return Status{};
    spdlog::info("pool {}: machine {} works; {} earlier failed boot(s) forgotten{}", m.pool,
                 m.name, h.failed, h.failing ? ", the pool boots again" : "");
    row.failed_boots = 0;
    row.next_boot_ms = 0;
    row.failing = false;
    return store_.machines().SetPoolBoots(row, now);
  }
  if (m.provider == "manual") return Status{};  // a hand-started worker is no boot
  std::string why;
  if (!m.ready_ms) {
    auto r = stop_reason_.find(m.id);
    why = r != stop_reason_.end() ? r->second : "it went away before its worker registered";
    if (!m.last_error.empty() && m.last_error.find(why) == std::string::npos) {
      why += " (" + m.last_error + ")";
    }
  } else {
    why = "its worker left " + FormatDuration(m.stopped_ms.value_or(now) - *m.ready_ms) +
          " after registering, having run nothing";
    if (!m.last_error.empty()) why += " (" + m.last_error + ")";
  }
  std::string tail;
  if (pool && !m.provider_id.empty()) {
    auto t = pool->provider->LogTail(m.provider_id, m.name, options_.log_tail_bytes);
    if (t) {
      tail = *t;
    } else if (t.error().kind != ErrorKind::kNotFound) {
      tail = "(the machine's log could not be read: " + t.error().message + ")";
    }
  }
  h = cloud::RecordBoot(h, false, now, pool ? pool->spec.scaling : cloud::PoolConfig{},
                        options_.autoscaler);
  row.failed_boots = h.failed;
  row.next_boot_ms = h.next_boot_at;
  row.failing = h.failing;
  row.boot_error = m.name + ": " + why;
  row.log_tail = tail;
  if (h.failing) {
    spdlog::error("pool {}: failing: {} boots in a row failed, the last {}; no more boots until "
                  "its config changes, `trainq pools reset {}`, or a worker of the pool "
                  "registers{}",
                  m.pool, h.failed, row.boot_error, m.pool,
                  tail.empty() ? "" : "; the end of its log:" + Indent(tail));
  } else {
    spdlog::warn("pool {}: boot failed ({} in a row): {}; next boot in {} at the earliest, one "
                 "machine at a time{}",
                 m.pool, h.failed, row.boot_error, FormatDuration(h.next_boot_at - now),
                 tail.empty() ? "" : "; the end of its log:" + Indent(tail));
  }
  return store_.machines().SetPoolBoots(row, now);
}

std::vector<std::string> Fleet::WorkerArgv(const PoolSpec& pool, const std::string& name) const {
  std::string server = options_.server_url;
  if (auto it = pool.params.find("server_url"); it != pool.params.end()) server = it->second;
  std::string token_file = TokenFilePath(options_.data_dir, pool.name());
  if (auto it = pool.params.find("token_file"); it != pool.params.end()) token_file = it->second;
  std::string trainq = options_.trainq_path;
  if (auto it = pool.params.find("trainq"); it != pool.params.end()) trainq = it->second;
  std::vector<std::string> argv = {trainq,  "worker",     "--server",
                                   server,  "--token-file", token_file,
                                   "--machine", name,     "--slots",
                                   std::to_string(pool.scaling.slots)};
  argv.push_back("--gpus");
  argv.push_back(pool.gpus > 0 ? "auto" : "none");
  if (auto it = pool.params.find("worker_gpus"); it != pool.params.end()) argv.back() = it->second;
  if (pool.runs_per_gpu > 1) {
    argv.push_back("--runs-per-gpu");
    argv.push_back(std::to_string(pool.runs_per_gpu));
  }
  if (pool.fuse_max > 1) {
    argv.push_back("--fuse-max");
    argv.push_back(std::to_string(pool.fuse_max));
  }
  // The worker's checkouts and run files, one directory per machine (two
  // workers never share a worktree cache): worker_data_dir with "{name}"
  // replaced by the machine's name; else, where the machine sees this host's
  // files (local processes; Slurm jobs, which already read the token file
  // from the data dir on a shared filesystem), <data dir>/machines/<name>;
  // else the worker's default, ./trainq-worker.
  std::string data_dir;
  if (auto it = pool.params.find("worker_data_dir"); it != pool.params.end()) {
    data_dir = Substitute(it->second, {{"name", name}});
  } else if (pool.provider == "local" || pool.provider == "slurm") {
    data_dir = (fs::path(options_.data_dir) / "machines" / name).string();
  }
  if (!data_dir.empty()) {
    argv.push_back("--data-dir");
    argv.push_back(data_dir);
  }
  // The dead-man switch works before the first registration too: a machine
  // that never reaches the server (wrong URL, firewall) still stops itself.
  argv.push_back("--orphan-timeout");
  argv.push_back(std::to_string(std::max<std::int64_t>(1, pool.orphan_timeout_ms / 1000)));
  if (!pool.self_stop.empty()) {
    argv.push_back("--self-stop");
    argv.push_back(pool.self_stop);
  }
  for (const auto& name : pool.env_passthrough) {
    argv.push_back("--env-passthrough");
    argv.push_back(name);
  }
  argv.push_back("--sandbox");
  argv.push_back(pool.sandbox);
  for (const auto& dir : pool.sandbox_writable) {
    argv.push_back("--sandbox-writable");
    argv.push_back(dir);
  }
  // This host's files: only a local worker shares them.
  if (pool.provider == "local" && pool.sandbox != "none") {
    for (const auto& path : options_.sandbox_hide) {
      argv.push_back("--sandbox-hide");
      argv.push_back(path);
    }
  }
  return argv;
}

Status Fleet::Boot(FleetPool& pool, int count) {
  const PoolSpec& spec = pool.spec;
  std::string token;
  if (spec.provider == "ec2" || spec.provider == "command" || spec.provider == "kubernetes") {
    if (auto t = ReadFile(TokenFilePath(options_.data_dir, spec.name()))) {
      token = std::string(Trim(*t));
    } else if (!spec.token.empty()) {
      token = spec.token.value;
    }
  }
  // The rows first, committed before any boot starts: a crash between the
  // provider's answer and recording it leaves a tagged machine that
  // reconcile adopts or stops. One transaction for them all.
  std::vector<BootJob> jobs;
  TRY(store_.InWriteTransaction([&]() -> Status {
    for (int i = 0; i < count; ++i) {
      TimeMs now = clock_.Now();
      MachineRow m;
      m.pool = spec.name();
      m.provider = spec.provider;
      m.state = "requested";
      m.slots = spec.scaling.slots;
      m.gpus = spec.gpus;
      m.hourly_cost = spec.scaling.hourly_cost;
      m.name =
          "tq-" + options_.instance + "-" + spec.name() + "-" + Base36(now) + std::to_string(i);
      ASSIGN_OR_RETURN(auto row, store_.machines().AddMachine(m, now));
      BootJob& job = jobs.emplace_back();
      job.row = row;
      job.pool = spec.name();
      job.provider = pool.provider.get();
      cloud::BootSpec& b = job.spec;
      b.tag = {spec.name(), options_.instance};
      b.name = m.name;
      b.slots = spec.scaling.slots;
      b.gpus = spec.gpus;
      b.params = spec.params;
      b.worker_argv = WorkerArgv(spec, m.name);
      b.env_passthrough = spec.env_passthrough;
      b.token = token;
    }
    return Status{};
  }));
  // A later pass records the answers (HarvestBoots).
  for (auto& job : jobs) boots_->Add(std::move(job));
  return Status{};
}
}  // namespace trainq
