#include "agent/daemon/fleet.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/daemon/worker_api.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"

namespace trainq {

namespace fs = std::filesystem;

namespace {

std::optional<cloud::MachineState> ParseMachineState(std::string_view s) {
  using cloud::MachineState;
  for (auto st : {MachineState::kRequested, MachineState::kBooting, MachineState::kReady,
                  MachineState::kDraining, MachineState::kStopping, MachineState::kStopped,
                  MachineState::kFailed}) {
    if (cloud::MachineStateName(st) == s) return st;
  }
  return std::nullopt;
}

// heard_since: when this fleet started listening (or came back from a
// stall): a worker could not be heard before that, so its silence counts
// from then at the earliest.
cloud::Machine ToMachine(const MachineRow& m, TimeMs heard_since = 0) {
  cloud::Machine cm;
  cm.row = m.id;
  cm.id = m.provider_id;
  cm.state = ParseMachineState(m.state).value_or(cloud::MachineState::kFailed);
  cm.booted_at = m.created_ms;
  cm.ready_at = m.ready_ms;
  cm.last_busy_at = m.last_busy_ms;
  cm.stopped_at = m.stopped_ms;
  if (m.ready_ms) cm.last_seen_at = std::max(m.last_seen_ms, heard_since);
  cm.live_leases = m.live_leases;
  return cm;
}

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

const PoolSpec* PoolForDemand(const std::vector<FleetPool>& pools, const std::string& pool,
                              int gpus, int nodes) {
  for (const auto& p : pools) {
    const bool fits = nodes <= p.spec.scaling.max;
    if (!pool.empty()) {
      if (p.spec.name() == pool) return fits ? &p.spec : nullptr;
      continue;
    }
    if (p.spec.gpus >= gpus && fits) return &p.spec;
  }
  return nullptr;
}

std::string UnservableReason(const std::vector<FleetPool>& pools, const std::string& pool,
                             int gpus, int nodes) {
  if (nodes > 0) {
    // Unservable because of its size: no pool (of enough GPUs) boots that many.
    int most = 0;
    const PoolSpec* named = nullptr;
    for (const auto& p : pools) {
      if (!pool.empty() ? p.spec.name() == pool : p.spec.gpus >= gpus) {
        if (p.spec.scaling.max >= most) named = &p.spec;
        most = std::max(most, p.spec.scaling.max);
      }
    }
    if (named && most < nodes) {
      // Name the knob the user has: serve's own pool comes from --machines,
      // a configured one from its `max` key.
      std::string knob = named->line > 0
                             ? "its max in the server config, line " + std::to_string(named->line)
                             : "trainq serve --machines";
      return "unservable: a gang of " + std::to_string(nodes) + " machines, but pool " +
             named->name() + " has at most " + std::to_string(most) + " (" + knob + ")";
    }
  }
  if (!pool.empty()) {
    std::string names;
    for (const auto& p : pools) names += (names.empty() ? "" : ", ") + p.spec.name();
    return "no pool named '" + pool + "' (pools: " + (names.empty() ? "none" : names) + ")";
  }
  int most = 0;
  for (const auto& p : pools) most = std::max(most, p.spec.gpus);
  return "no pool has " + std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs") +
         " (the most is " + std::to_string(most) + ")";
}

Result<std::string> InstanceId(const std::string& data_dir) {
  const std::string path = (fs::path(data_dir) / "instance-id").string();
  if (auto text = ReadFile(path)) {
    auto id = std::string(Trim(*text));
    if (!id.empty()) return id;
  }
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  unsigned char bytes[4];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) {
    if (fd >= 0) close(fd);
    return Fail(ErrorKind::kInternal, "cannot read /dev/urandom");
  }
  close(fd);
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  TRY(WriteFile(path, id + "\n"));
  return id;
}

std::string PoolConfigHash(const PoolSpec& spec, const std::string& server_url) {
  std::string text = spec.provider + "\n" + PoolServerUrl(spec, server_url) + "\n" +
                     spec.token.source + "\n" + std::to_string(spec.gpus) + "\n" +
                     std::to_string(spec.scaling.slots) + "\n" +
                     std::to_string(spec.scaling.boot_timeout_ms) + "\n" + spec.self_stop + "\n";
  for (const auto& [k, v] : spec.params) text += k + "=" + v + "\n";
  return fmt::format("{:016x}", std::hash<std::string>{}(text));
}

// ---- Boots off the loop ------------------------------------------------------
// One boot: built and recorded on the loop thread; only provider->Boot(spec)
// runs on a boot thread.
struct Fleet::BootJob {
  enum class State { kQueued, kRunning, kDone };
  std::int64_t row = 0;
  std::string pool;
  cloud::Provider* provider = nullptr;
  cloud::BootSpec spec;
  State state = State::kQueued;
  Result<std::string> result = std::string();
};

// At most `threads` Provider::Boot calls at once; the threads start as boots
// come and end with this object (after their current call).
class Fleet::BootThreads {
 public:
  explicit BootThreads(int threads) : max_threads_(static_cast<std::size_t>(std::max(1, threads))) {}
  ~BootThreads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BootThreads(const BootThreads&) = delete;
  BootThreads& operator=(const BootThreads&) = delete;

  void Add(BootJob job) {
    std::lock_guard lock(mu_);
    const std::int64_t row = job.row;
    jobs_.emplace(row, std::move(job));
    queue_.push_back(row);
    if (threads_.size() < max_threads_ && threads_.size() < queue_.size() + running_) {
      threads_.emplace_back([this] { Loop(); });
    }
    work_.notify_one();
  }

  // The finished boots, in the order they finished.
  std::vector<BootJob> TakeDone() {
    std::lock_guard lock(mu_);
    std::vector<BootJob> out;
    out.reserve(done_.size());
    for (std::int64_t row : done_) {
      auto it = jobs_.find(row);
      out.push_back(std::move(it->second));
      jobs_.erase(it);
    }
    done_.clear();
    return out;
  }

  // Finished boots whose recording failed (the store refused the write: a
  // full disk), finished again for the next harvest.
  void PutBack(std::vector<BootJob> jobs) {
    std::lock_guard lock(mu_);
    std::vector<std::int64_t> rows;
    for (auto& job : jobs) {
      const std::int64_t row = job.row;
      job.state = BootJob::State::kDone;
      jobs_.emplace(row, std::move(job));
      rows.push_back(row);
    }
    done_.insert(done_.begin(), rows.begin(), rows.end());
  }

  // The queued boots of `pool` ("" = all), taken off the queue.
  std::vector<BootJob> TakeQueued(const std::string& pool) {
    std::lock_guard lock(mu_);
    std::vector<BootJob> out;
    std::erase_if(queue_, [&](std::int64_t row) {
      auto it = jobs_.find(row);
      if (!pool.empty() && it->second.pool != pool) return false;
      out.push_back(std::move(it->second));
      jobs_.erase(it);
      return true;
    });
    return out;
  }

  // Whether machine `row`'s boot is queued (taken off: true), or running or
  // finished (false, *pending set), or unknown (false).
  bool CallOff(std::int64_t row, bool* pending) {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(row);
    *pending = it != jobs_.end();
    if (!*pending || it->second.state != BootJob::State::kQueued) return false;
    std::erase(queue_, row);
    jobs_.erase(it);
    *pending = false;
    return true;
  }

  // Until nothing is queued or running, or `until`; true when nothing is.
  bool WaitIdle(std::chrono::steady_clock::time_point until) {
    std::unique_lock lock(mu_);
    return done_cv_.wait_until(lock, until, [&] { return queue_.empty() && running_ == 0; });
  }

  // Names of `pool`'s machines whose boot is not recorded yet.
  std::set<std::string> Names(const std::string& pool) const {
    std::lock_guard lock(mu_);
    std::set<std::string> out;
    for (const auto& [row, job] : jobs_) {
      if (job.pool == pool) out.insert(job.spec.name);
    }
    return out;
  }

  int Pending() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(jobs_.size());
  }
  bool Pending(std::int64_t row) const {
    std::lock_guard lock(mu_);
    return jobs_.contains(row);
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const std::int64_t row = queue_.front();
      queue_.pop_front();
      BootJob& job = jobs_.at(row);  // stays put: only queued and done jobs are erased
      job.state = BootJob::State::kRunning;
      ++running_;
      lock.unlock();
      Result<std::string> result = std::string();
      try {
        result = job.provider->Boot(job.spec);
      } catch (const std::exception& e) {
        result = Fail(ErrorKind::kInternal, std::string("boot: ") + e.what());
      }
      lock.lock();
      job.result = std::move(result);
      job.state = BootJob::State::kDone;
      done_.push_back(row);
      --running_;
      done_cv_.notify_all();
    }
  }

  const std::size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable work_;     // a boot queued, or stop
  std::condition_variable done_cv_;  // a boot finished
  std::map<std::int64_t, BootJob> jobs_;  // by machine row: queued, running, done
  std::deque<std::int64_t> queue_;
  std::vector<std::int64_t> done_;
  std::size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

Fleet::Fleet(Store& store, const Clock& clock, std::vector<FleetPool> pools, FleetOptions options)
    : store_(store),
      clock_(clock),
      pools_(std::move(pools)),
      options_(std::move(options)),
      boots_(std::make_unique<BootThreads>(options_.boot_threads)) {
  rng_state_ = options_.seed ? options_.seed : std::random_device{}();
  rng_state_ = rng_state_ * 0x9E3779B97F4A7C15ull + 1;
}

Fleet::Fleet(Fleet&&) = default;

Fleet::~Fleet() {
  if (!boots_) return;  // moved from
  if (boots_->Pending() > 0) {
    auto st = CallOffBoots("", "never booted: trainq serve stopped first");
    if (st) {
      auto settled = SettleBoots(options_.boot_wait_ms);
      if (settled && !*settled) {
        spdlog::warn("{} boot(s) still unanswered after {}; their machines stay `requested`, "
                     "and the next serve adopts or stops them by their tag",
                     boots_->Pending(), FormatDuration(options_.boot_wait_ms));
      }
      if (!settled) st = std::unexpected(settled.error());
    }
    if (!st) spdlog::warn("recording the boots in flight: {}", st.error().message);
  }
  boots_.reset();  // joins the threads
}

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
    auto st = pool->provider->Stop(id);
    Record(name, st.has_value(), st ? "" : st.error().message);
    if (!st) spdlog::warn("pool {}: stop of {} failed: {} (tried again while it is listed)", name, id, st.error().message);
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

double Fleet::NextUnit() {
  // xorshift64*: jitter only, not security.
  rng_state_ ^= rng_state_ >> 12;
  rng_state_ ^= rng_state_ << 25;
  rng_state_ ^= rng_state_ >> 27;
  return static_cast<double>((rng_state_ * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

FleetPool* Fleet::FindPool(const std::string& name) {
  for (auto& p : pools_) {
    if (p.spec.name() == name) return &p;
  }
  return nullptr;
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

Status Fleet::ComputeSpend(std::vector<cloud::PoolInput>& inputs, cloud::OverallBudget& overall,
                           TimeMs now) {
  bool any = overall.per_day > 0 || overall.per_month > 0;
  for (const auto& p : pools_) {
    any = any || p.spec.scaling.budget_per_day > 0 || p.spec.scaling.budget_per_month > 0;
  }
  if (!any) return Status{};
  ASSIGN_OR_RETURN(auto all, store_.machines().List(true));
  const TimeMs day = cloud::UtcDayStart(now);
  const TimeMs month = cloud::UtcMonthStart(now);
  std::map<std::string, std::vector<cloud::BilledMachine>> by_pool;
  for (const auto& m : all) {
    if (m.provider == "manual") continue;
    if (m.stopped_ms && *m.stopped_ms < month) continue;
    by_pool[m.pool].push_back({m.created_ms, m.stopped_ms, m.hourly_cost});
  }
  overall.spend = {};
  for (const auto& [name, spans] : by_pool) {
    const FleetPool* p = FindPool(name);
    TimeMs min_bill = p ? p->spec.scaling.min_bill_ms : 60'000;
    cloud::Spend s{cloud::SpendBetween(spans, day, now, min_bill),
                   cloud::SpendBetween(spans, month, now, min_bill)};
    overall.spend.day += s.day;
    overall.spend.month += s.month;
    for (auto& in : inputs) {
      if (in.config.name == name) in.spend = s;
    }
  }
  return Status{};
}

void Fleet::ReportBudget(const cloud::Decision& d, const std::vector<cloud::PoolInput>& inputs,
                         const cloud::OverallBudget& overall, TimeMs now) {
  auto report = [&](const std::string& pool, const std::string& cap, double day, double month,
                    double per_day, double per_month, bool drain) {
    if (per_day <= 0 && per_month <= 0) return;
    // The cap's name ("per_day budget"), not its figures, decides a new line.
    const std::string kind = cap.substr(0, cap.find('$'));
    auto& logged = cap_logged_[pool];
    const bool changed = logged != kind;
    if (changed) {
      if (!cap.empty()) {
        spdlog::warn("pool {}: {}: no more boots{} until the UTC {} ends", pool, cap,
                     drain ? ", machines drained" : "",
                     cap.find("per_month") != std::string::npos ? "month" : "day");
      } else if (!logged.empty()) {
        spdlog::info("pool {}: within budget again; boots allowed", pool);
      }
      logged = kind;
    }
    auto& at = budget_written_at_[pool];
    if (!changed && at != 0 && now - at < 10'000) return;  // status within 10 s
    at = now;
    Machines::PoolStateRow row;
    row.pool = pool;
    row.spent_day = day;
    row.spent_month = month;
    row.budget_per_day = per_day;
    row.budget_per_month = per_month;
    row.cap = cap;
    if (auto st = store_.machines().SetPoolBudget(row, now); !st) {
      spdlog::warn("pool {}: cannot record its budget: {}", pool, st.error().message);
    }
  };
  for (size_t i = 0; i < inputs.size() && i < d.pools.size(); ++i) {
    const auto& c = inputs[i].config;
    std::string cap = d.pools[i].cap;
    if (cap.starts_with("overall")) cap.clear();  // told once, under "*"
    report(c.name, cap, inputs[i].spend.day, inputs[i].spend.month, c.budget_per_day,
           c.budget_per_month, c.drain_at_cap);
  }
  std::string cap;
  if (overall.per_day > 0 && overall.spend.day >= overall.per_day) {
    cap = fmt::format("overall per_day budget ${:.2f} reached (${:.2f} spent)", overall.per_day,
                      overall.spend.day);
  } else if (overall.per_month > 0 && overall.spend.month >= overall.per_month) {
    cap = fmt::format("overall per_month budget ${:.2f} reached (${:.2f} spent)",
                      overall.per_month, overall.spend.month);
  } else {
    for (const auto& p : d.pools) {
      if (p.cap.starts_with("overall")) cap = p.cap;
    }
  }
  report("*", cap, overall.spend.day, overall.spend.month, overall.per_day, overall.per_month,
         overall.drain_at_cap);
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

void Fleet::Record(const std::string& pool, bool ok, const std::string& error) {
  TimeMs now = clock_.Now();
  auto& h = health_[pool];
  bool was_failing = h.consecutive_failures > 0;
  h = cloud::RecordProviderCall(h, ok, now, options_.autoscaler);
  // The first outcome of each pool is always written: a row left failing by an
  // earlier serve must not outlive a provider that works again.
  bool first = health_written_.insert(pool).second;
  if (!ok || was_failing || first) {
    Machines::PoolHealthRow row;
    row.pool = pool;
    row.consecutive_failures = h.consecutive_failures;
    row.next_retry_ms = h.next_retry_at;
    row.last_error = ok ? "" : error;
    if (auto st = store_.machines().SetPoolHealth(row, now); !st) {
      spdlog::warn("pool {}: cannot record provider health: {}", pool, st.error().message);
    }
  }
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

std::string BudgetNote(const std::string& pool, const std::string& cap) {
  if (cap.starts_with("overall ")) return "pool " + pool + " held back: the " + cap;
  return "pool " + pool + " at its " + cap;
}

namespace {

// One note per (pool, gpus): the store keeps one, so several reasons are
// joined, in the order they were found.
std::vector<Machines::WaitingNote> MergeNotes(std::vector<Machines::WaitingNote> notes) {
  std::vector<Machines::WaitingNote> out;
  for (auto& n : notes) {
    auto same = std::find_if(out.begin(), out.end(), [&](const Machines::WaitingNote& o) {
      return o.pool == n.pool && o.gpus == n.gpus && o.nodes == n.nodes;
    });
    if (same == out.end()) {
      out.push_back(std::move(n));
    } else if (same->note.find(n.note) == std::string::npos) {
      same->note += "; " + n.note;
    }
  }
  return out;
}

}  // namespace

Status Fleet::StopMachine(FleetPool& pool, std::int64_t row, const std::string& id) {
  TimeMs now = clock_.Now();
  if (row) TRY(store_.machines().SetMachineState(row, "stopping", now));
  auto st = pool.provider->Stop(id);
  Record(pool.spec.name(), st.has_value(), st ? "" : st.error().message);
  if (!st) {
    spdlog::warn("pool {}: stop of {} failed: {}", pool.spec.name(), id, st.error().message);
    return Status{};  // stays `stopping`; the next pass tries again
  }
  if (row) TRY(store_.machines().SetMachineState(row, "stopped", clock_.Now()));
  return Status{};
}

Status Fleet::Step() {
  TimeMs now = clock_.Now();
  // A pass long after the previous one: this serve was stopped or stalled, and
  // answered no worker meanwhile; silence counts from now.
  if (last_step_ms_ == 0 || now - last_step_ms_ > options_.stall_ms) heard_since_ = now;
  last_step_ms_ = now;
  if (auto n = store_.runs().ExpireLeases(now); n && *n > 0) {
    spdlog::warn("{} lease(s) expired: their runs failed (retried after a backoff, or dead), or "
                 "went back to the queue without using an attempt when serve was away",
                 *n);
  }
  // The boots that answered since the last pass, recorded before anything
  // reads the machines.
  TRY(HarvestBoots());
  // Gather: machines, boot health, demand, and (paced) the providers' lists.
  ASSIGN_OR_RETURN(auto machines, store_.machines().List(false));
  TRY(ForgetSilentWorkers(machines, now));
  ASSIGN_OR_RETURN(auto states, PoolStates(now));
  TRY(JudgeBoots(machines, states));
  ASSIGN_OR_RETURN(auto demand, ReadDemand(now));
  ListedNames listed;
  ASSIGN_OR_RETURN(auto inputs, Inputs(machines, states, demand, now, listed));
  // Decide.
  cloud::OverallBudget overall = options_.budget;
  TRY(ComputeSpend(inputs, overall, now));
  last_ = cloud::Autoscale(inputs, now, options_.autoscaler, overall);
  ReportBudget(last_, inputs, overall, now);
  TRY(NoteWaiting(demand, now));
  PaceListing(inputs, now);
  // Apply, in the autoscaler's order.
  for (const auto& a : last_.actions) TRY(Apply(a, listed));
  return Status{};
}

// A worker started by hand that has not called for manual_silence_ms is gone.
Status Fleet::ForgetSilentWorkers(const std::vector<MachineRow>& machines, TimeMs now) {
  for (const auto& m : machines) {
    if (m.provider != "manual" || m.state == "stopped" || m.state == "failed") continue;
    if (now - m.last_seen_ms < options_.manual_silence_ms) continue;
    std::string why = "hand-started worker silent for " + FormatDuration(now - m.last_seen_ms);
    // Stopped when last heard from: that is when it was last of any use.
    ASSIGN_OR_RETURN(int returned, store_.machines().ForgetMachine(m.id, m.last_seen_ms, why));
    spdlog::warn("pool {}: machine {} ({}) is gone: {}{}", m.pool, m.id, m.name, why,
                 returned ? "; " + std::to_string(returned) + " run(s) back in the queue" : "");
  }
  return {};
}

// Boot health lives in the store: `trainq pools reset` writes it too. On the
// first pass, a pool whose config changed forgets its failed boots.
Result<std::map<std::string, Machines::PoolStateRow>> Fleet::PoolStates(TimeMs now) {
  ASSIGN_OR_RETURN(auto state_rows, store_.machines().PoolStates());
  std::map<std::string, Machines::PoolStateRow> states;
  for (auto& r : state_rows) states[r.pool] = std::move(r);
  if (config_checked_) return states;
  config_checked_ = true;
  for (const auto& pool : pools_) {
    auto it = states.find(pool.spec.name());
    if (it == states.end()) continue;
    auto& row = it->second;
    std::string hash = PoolConfigHash(pool.spec, options_.server_url);
    if (row.config_hash == hash || (row.failed_boots == 0 && !row.failing)) continue;
    spdlog::info("pool {}: its config changed; {} earlier failed boot(s) forgotten",
                 pool.spec.name(), row.failed_boots);
    row.failed_boots = 0;
    row.next_boot_ms = 0;
    row.failing = false;
    row.config_hash = hash;
    TRY(store_.machines().SetPoolBoots(row, now));
  }
  return states;
}

// The runnable runs per pool that serves them, and why the others wait.
Result<Fleet::Demand> Fleet::ReadDemand(TimeMs now) {
  ASSIGN_OR_RETURN(auto demand, store_.machines().RunnableDemand(now));
  ASSIGN_OR_RETURN(auto health, store_.machines().PoolHealth());
  Demand out;
  for (const auto& d : demand) {
    const PoolSpec* p = PoolForDemand(pools_, d.pool, d.gpus, d.nodes);
    if (p) out.served.push_back({{d.pool, d.gpus, "", d.nodes}, p->name()});
    if (!p) {
      // Nothing can serve them: `trainq status` shows why, and
      // `serve --until-idle` gives up on them.
      out.notes.push_back(
          {d.pool, d.gpus, UnservableReason(pools_, d.pool, d.gpus, d.nodes), d.nodes});
      continue;
    }
    out.runs[p->name()] += static_cast<int>(d.runnable);
    out.gang_nodes[p->name()] = std::max(out.gang_nodes[p->name()], d.nodes);
    for (const auto& h : health) {
      if (h.pool == p->name() && h.consecutive_failures > 0) {
        out.notes.push_back({d.pool, d.gpus,
                             "pool " + h.pool + " failing to boot machines (" +
                                 std::to_string(h.consecutive_failures) + " in a row): " +
                                 h.last_error,
                             d.nodes});
      }
    }
  }
  return out;
}

// The autoscaler's input per pool: its machines, demand and health, and the
// provider's list when it is due (the listed machines' names into `listed`).
Result<std::vector<cloud::PoolInput>> Fleet::Inputs(const std::vector<MachineRow>& machines,
                                            const std::map<std::string, Machines::PoolStateRow>& states,
                                            Demand& demand, TimeMs now, ListedNames& listed) {
  std::vector<cloud::PoolInput> inputs;
  for (auto& pool : pools_) {
    cloud::PoolInput in;
    in.config = pool.spec.scaling;
    in.demand = demand.runs[pool.spec.name()];
    in.gang_nodes = demand.gang_nodes[pool.spec.name()];
    in.health = health_[pool.spec.name()];
    if (auto st = states.find(pool.spec.name()); st != states.end()) {
      in.boot = {st->second.failed_boots, st->second.next_boot_ms, st->second.failing};
    }
    for (const auto& m : machines) {
      if (m.pool != pool.spec.name() || m.provider != pool.spec.provider) continue;
      if (!ParseMachineState(m.state)) continue;
      in.machines.push_back(ToMachine(m, heard_since_));
      // A worker may register before its boot answered: until the answer
      // is recorded the machine is `requested` here (live, never drained
      // or stopped by an id it does not have yet).
      if (m.provider_id.empty() && (m.state == "ready" || m.state == "booting") &&
          boots_->Pending(m.id)) {
        in.machines.back().state = cloud::MachineState::kRequested;
      }
    }
    if (now >= in.health.next_retry_at && now >= next_list_at_[pool.spec.name()]) {
      ++list_calls_[pool.spec.name()];
      auto listing = pool.provider->List({pool.spec.name(), options_.instance});
      Record(pool.spec.name(), listing.has_value(), listing ? "" : listing.error().message);
      if (listing) {
        HideBooting(pool, machines, *listing);
        std::vector<std::string> ids;
        for (const auto& l : *listing) {
          ids.push_back(l.id);
          listed[pool.spec.name()][l.id] = l.name;
          if (!l.ended.empty()) in.ended[l.id] = {l.ended, l.disrupted};
        }
        TRY(NoteListed(pool, machines, *listing));
        in.listing = std::move(ids);
      } else {
        spdlog::warn("pool {}: listing machines failed: {}", pool.spec.name(),
                     listing.error().message);
      }
      in.health = health_[pool.spec.name()];
    }
    inputs.push_back(std::move(in));
  }
  return inputs;
}

// Why runs wait, written when it changed. Runs held back by a budget cap say
// so (`trainq status`, commit statuses).
Status Fleet::NoteWaiting(Demand& demand, TimeMs now) {
  for (const auto& p : last_.pools) {
    if (p.cap.empty() || p.boots_held <= 0) continue;
    for (const auto& [key, pool] : demand.served) {
      if (pool != p.pool) continue;
      Machines::WaitingNote n = key;
      n.note = BudgetNote(p.pool, p.cap);
      demand.notes.push_back(std::move(n));
    }
  }
  auto notes = MergeNotes(std::move(demand.notes));
  if (!last_notes_ || notes != *last_notes_) {
    TRY(store_.machines().SetWaitingNotes(notes, now));
    last_notes_ = notes;
  }
  return {};
}

// List() pacing: the next call comes sooner while the pool is changing.
void Fleet::PaceListing(const std::vector<cloud::PoolInput>& inputs, TimeMs now) {
  for (const auto& in : inputs) {
    const std::string& name = in.config.name;
    bool active = in.demand != last_demand_[name];
    for (const auto& m : in.machines) {
      using cloud::MachineState;
      if (m.state == MachineState::kRequested || m.state == MachineState::kBooting ||
          m.state == MachineState::kDraining || m.state == MachineState::kStopping) {
        active = true;
      }
    }
    for (const auto& a : last_.actions) active = active || a.pool == name;
    last_demand_[name] = in.demand;
    TimeMs& next = next_list_at_[name];
    if (in.listing) {
      next = cloud::NextListAt(now, active, in.config, NextUnit());
    } else if (active) {
      next = std::min(next, cloud::NextListAt(now, true, in.config, NextUnit()));
    }
  }
}

// One action of the autoscaler (fleet.h lists what each does).
Status Fleet::Apply(const cloud::Action& a, const ListedNames& listed) {
  FleetPool* pool = nullptr;
  for (auto& p : pools_) {
    if (p.spec.name() == a.pool) pool = &p;
  }
  if (!pool) return {};
  const TimeMs now = clock_.Now();
  switch (a.kind) {
    case cloud::ActionKind::kForget: {
      // A boot still queued is called off; one in flight is stopped when it
      // answers.
      bool in_flight = false;
      boots_->CallOff(a.row, &in_flight);
      if (in_flight) given_up_.insert(a.row);
      if (a.reason == "boot never answered") {
        stop_reason_[a.row] = "the provider never answered its boot";
      } else {
        stop_reason_[a.row] = "the provider stopped listing it before its worker registered";
      }
      ASSIGN_OR_RETURN(int returned, store_.machines().ForgetMachine(a.row, now, a.reason));
      spdlog::info("pool {}: machine {} is gone ({}){}", a.pool, a.machine, a.reason,
                   returned ? "; " + std::to_string(returned) + " run(s) back in the queue" : "");
      return {};
    }
    case cloud::ActionKind::kLost: return ApplyLost(*pool, a, now);
    case cloud::ActionKind::kEnded: return EndMachine(*pool, a);
    case cloud::ActionKind::kStop:
      spdlog::info("pool {}: stopping {} ({})", a.pool, a.machine, a.reason);
      if (a.row) deliberate_.insert(a.row);  // budget, or a machine not wanted: no failed boot
      return StopMachine(*pool, a.row, a.machine);
    case cloud::ActionKind::kAdopt: {
      MachineRow m;
      m.pool = a.pool;
      m.provider = pool->spec.provider;
      m.provider_id = a.machine;
      m.state = "booting";
      m.slots = pool->spec.scaling.slots;
      m.gpus = pool->spec.gpus;
      m.hourly_cost = pool->spec.scaling.hourly_cost;
      if (auto p = listed.find(a.pool); p != listed.end()) {
        if (auto n = p->second.find(a.machine); n != p->second.end()) m.name = n->second;
      }
      spdlog::info("pool {}: adopting {} ({})", a.pool, a.machine, a.reason);
      ASSIGN_OR_RETURN(auto row, store_.machines().AddMachine(m, now));
      (void)row;
      return {};
    }
    case cloud::ActionKind::kDrain: {
      ASSIGN_OR_RETURN(bool drained, store_.machines().DrainMachine(a, now));
      if (!drained) {
        int held = 0;
        if (repeats_.Allow("drain called off " + a.pool + " " + a.machine, now, &held)) {
          spdlog::info("pool {}: drain of {} called off: it took work meanwhile{}", a.pool,
                       a.machine, LogLimiter::HeldBackNote(held));
        }
        return {};
      }
      spdlog::info("pool {}: draining {} ({})", a.pool, a.machine, a.reason);
      deliberate_.insert(a.row);
      // A budget drain may leave runs on it: a later pass stops it once
      // they are done.
      if (!a.guard.at_cap) TRY(StopMachine(*pool, a.row, a.machine));
      return {};
    }
    case cloud::ActionKind::kBoot:
      spdlog::info("pool {}: booting {} machine(s) ({})", a.pool, a.count, a.reason);
      return Boot(*pool, a.count);
  }
  return {};
}

// A machine whose worker went silent or never registered: its runs back in
// the queue (no attempt used), then the provider stops it.
Status Fleet::ApplyLost(FleetPool& pool, const cloud::Action& a, TimeMs now) {
  std::string why = a.reason;
  if (a.reason == "missed boot_timeout") {
    why = "no worker registered within boot_timeout (" +
          FormatDuration(pool.spec.scaling.boot_timeout_ms) + ")";
    stop_reason_[a.row] = why;
  }
  ASSIGN_OR_RETURN(int returned, store_.machines().LoseMachine(a.row, now, why));
  spdlog::warn("pool {}: machine {} is lost: {}{}; stopping it", a.pool, a.machine, why,
               returned ? "; " + std::to_string(returned) +
                              " run(s) back in the queue, no attempt used"
                        : "");
  // While the provider backs off, the machine stays listed and a later
  // pass stops it ("stopped but still listed").
  if (now >= health_[a.pool].next_retry_at) {
    auto st = pool.provider->Stop(a.machine);
    Record(a.pool, st.has_value(), st ? "" : st.error().message);
    if (!st) {
      spdlog::warn("pool {}: stop of lost machine {} failed: {} (tried again while it is "
                   "listed)",
                   a.pool, a.machine, st.error().message);
    }
  }
  return {};
}

// ---- What the provider says of its machines (kubernetes) -------------------
// A booting machine's note (why it is not up yet: the scheduler's message) is
// its last_error while it boots: `trainq machines` and `trainq status` show
// it, and the serve log says when it changes.
Status Fleet::NoteListed(FleetPool& pool, const std::vector<MachineRow>& machines,
                         const std::vector<cloud::ListedMachine>& listing) {
  std::map<std::string, const cloud::ListedMachine*> by_id;
  for (const auto& l : listing) by_id[l.id] = &l;
  for (const auto& m : machines) {
    if (m.pool != pool.spec.name() || m.provider != pool.spec.provider) continue;
    if (m.state != "booting" && m.state != "requested") continue;
    auto it = by_id.find(m.provider_id);
    if (it == by_id.end() || !it->second->ended.empty()) continue;
    const std::string& note = it->second->note;
    if (note == m.last_error) continue;
    TRY(store_.machines().NoteMachine(m.id, note, clock_.Now()));
    if (!note.empty()) spdlog::warn("pool {}: machine {} not up yet: {}", m.pool, m.name, note);
  }
  return Status{};
}

// The provider reports a machine over though it still lists it: record why,
// return its runs to the queue (no attempt used), and stop (delete) it.
Status Fleet::EndMachine(FleetPool& pool, const cloud::Action& a) {
  const TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(auto row, store_.machines().Machine(a.row));
  const bool registered = row && row->ready_ms.has_value();
  int returned = 0;
  if (a.disrupted) {
    // The cluster took it: no failure of the pool's machines.
    deliberate_.insert(a.row);
    ASSIGN_OR_RETURN(returned, store_.machines().LoseMachine(a.row, now, a.reason));
  } else if (registered) {
    ASSIGN_OR_RETURN(returned, store_.machines().ForgetMachine(a.row, now, a.reason));
  } else {
    // A failed boot, known at once: JudgeBoots records it (back-off, failing).
    stop_reason_[a.row] = a.reason;
    TRY(store_.machines().SetMachineState(a.row, "failed", now, "boot: " + a.reason));
  }
  spdlog::warn("pool {}: machine {} is over: {}{}; deleting it", a.pool, a.machine, a.reason,
               returned ? "; " + std::to_string(returned) +
                              " run(s) back in the queue, no attempt used"
                        : "");
  if (now >= health_[a.pool].next_retry_at) {
    auto st = pool.provider->Stop(a.machine);
    Record(a.pool, st.has_value(), st ? "" : st.error().message);
    if (!st) {
      spdlog::warn("pool {}: stop of {} failed: {} (tried again while it is listed)", a.pool,
                   a.machine, st.error().message);
    }
  }
  return Status{};
}

Result<int> Fleet::LiveMachines() {
  ASSIGN_OR_RETURN(auto machines, store_.machines().List(false));
  int n = 0;
  for (const auto& m : machines) {
    for (const auto& p : pools_) {
      if (m.pool == p.spec.name() && m.provider == p.spec.provider && m.state != "stopped" &&
          m.state != "failed") {
        ++n;
      }
    }
  }
  return n;
}

Status Fleet::StopAll(bool local_only) {
  // Boots first: those not started are called off, those in flight get
  // boot_wait_ms to answer (then their machines are stopped below); a boot
  // answering later is stopped when it does.
  if (boots_->Pending() > 0) {
    for (const auto& pool : pools_) {
      if (local_only && pool.spec.provider != "local") continue;
      TRY(CallOffBoots(pool.spec.name(), "never booted: trainq serve is stopping"));
    }
    ASSIGN_OR_RETURN(bool settled, SettleBoots(options_.boot_wait_ms));
    (void)settled;  // rows still `requested` are given up below
  }
  ASSIGN_OR_RETURN(auto machines, store_.machines().List(false));
  for (auto& pool : pools_) {
    if (local_only && pool.spec.provider != "local") continue;
    for (const auto& m : machines) {
      if (m.pool != pool.spec.name() || m.provider != pool.spec.provider) continue;
      if (m.state == "stopped" || m.state == "failed") continue;
      if (local_only) {
        if (m.provider_id.empty()) {
          bool in_flight = false;
          boots_->CallOff(m.id, &in_flight);
          if (in_flight) given_up_.insert(m.id);
        } else {
          auto st = pool.provider->Stop(m.provider_id);
          if (!st) spdlog::warn("pool {}: stop of {}: {}", m.pool, m.name, st.error().message);
        }
        ASSIGN_OR_RETURN(int returned, store_.machines().ForgetMachine(m.id, clock_.Now(),
                                                            "trainq serve stopped"));
        if (returned) spdlog::info("{} run(s) of {} back in the queue", returned, m.name);
        continue;
      }
      if (m.state == "ready") {
        cloud::Action drain;
        drain.kind = cloud::ActionKind::kDrain;
        drain.pool = m.pool;
        drain.machine = m.provider_id;
        drain.row = m.id;
        drain.guard.last_busy_at = m.last_busy_ms;
        // A gang too big for the pool waits for nothing this machine does.
        drain.guard.max_nodes = pool.spec.scaling.max;
        ASSIGN_OR_RETURN(bool ok, store_.machines().DrainMachine(drain, clock_.Now()));
        if (!ok) {
          int held = 0;
          if (repeats_.Allow("holds work " + m.pool + " " + m.name, clock_.Now(), &held)) {
            spdlog::warn("pool {}: {} holds work; not stopped{}", m.pool, m.name,
                         LogLimiter::HeldBackNote(held));
          }
          continue;
        }
      }
      if (m.provider_id.empty()) {
        bool in_flight = false;
        boots_->CallOff(m.id, &in_flight);
        if (in_flight) given_up_.insert(m.id);
        TRY(store_.machines().SetMachineState(m.id, "stopped", clock_.Now(), "never booted"));
        continue;
      }
      spdlog::info("pool {}: stopping {} (queue empty, exiting)", m.pool, m.name);
      TRY(StopMachine(pool, m.id, m.provider_id));
    }
  }
  return Status{};
}

}  // namespace trainq
