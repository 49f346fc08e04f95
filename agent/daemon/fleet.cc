// Fleet's loop: Step (gather, decide, apply), stopping machines, StopAll.
// The boots are in fleet_boot.cc, the spend and budget in fleet_budget.cc.
#include "agent/daemon/fleet.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/daemon/fleet_internal.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"

namespace trainq {

namespace fs = std::filesystem;

namespace fleet_internal {

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
cloud::Machine ToMachine(const MachineRow& m, TimeMs heard_since) {
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

}  // namespace fleet_internal

using fleet_internal::ParseMachineState;
using fleet_internal::ToMachine;

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

bool Fleet::CallStop(FleetPool& pool, const std::string& id, std::string_view what,
                     std::string_view then) {
  auto st = pool.provider->Stop(id);
  Record(pool.spec.name(), st.has_value(), st ? "" : st.error().message);
  if (!st) {
    spdlog::warn("pool {}: stop of {}{} failed: {}{}", pool.spec.name(), what, id,
                 st.error().message, then);
  }
  return st.has_value();
}

void Fleet::StopUnlessBackingOff(FleetPool& pool, const std::string& id, TimeMs now,
                                 std::string_view what) {
  // While the provider backs off, the machine stays listed and a later pass
  // stops it ("stopped but still listed").
  if (now < health_[pool.spec.name()].next_retry_at) return;
  CallStop(pool, id, what, " (tried again while it is listed)");
}

Status Fleet::StopMachine(FleetPool& pool, std::int64_t row, const std::string& id) {
  TimeMs now = clock_.Now();
  if (row) TRY(store_.machines().SetMachineState(row, "stopping", now));
  if (!CallStop(pool, id, "", "")) return Status{};  // stays `stopping`; the next pass tries again
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
        TRY(RecordUnansweredBoots(pool, machines, *listing, in));
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

// A boot that answered a process that stopped before recording the answer
// (serve killed, or the replica holding the duties killed and another taking
// them over): its row has a name and no provider id, and is no boot of this
// fleet; the provider lists a tagged machine of that name. The id is
// recorded, so the machine stays the row's, with its runs, rather than being
// stopped as an unknown one while its row waits to be found silent.
Status Fleet::RecordUnansweredBoots(FleetPool& pool, const std::vector<MachineRow>& machines,
                                    const std::vector<cloud::ListedMachine>& listing,
                                    cloud::PoolInput& in) {
  std::set<std::string> known;
  for (const auto& m : machines) {
    if (m.pool == pool.spec.name() && !m.provider_id.empty()) known.insert(m.provider_id);
  }
  for (const auto& l : listing) {
    if (l.name.empty() || known.contains(l.id)) continue;
    for (const auto& m : machines) {
      if (m.pool != pool.spec.name() || m.name != l.name || !m.provider_id.empty() ||
          boots_->Pending(m.id) ||
          (m.state != "requested" && m.state != "booting" && m.state != "ready")) {
        continue;
      }
      if (auto st = store_.machines().SetMachineProviderId(m.id, l.id, clock_.Now()); !st) {
        spdlog::warn("pool {}: machine {}: {}", pool.spec.name(), m.name, st.error().message);
        break;
      }
      spdlog::info(
          "pool {}: machine {} is {} (its boot answered a trainq serve that stopped "
          "before recording it)",
          pool.spec.name(), m.name, l.id);
      known.insert(l.id);
      for (auto& im : in.machines) {
        if (im.row != m.id) continue;
        im.id = l.id;
        if (im.state == cloud::MachineState::kRequested) im.state = cloud::MachineState::kBooting;
      }
      break;
    }
  }
  return {};
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
  StopUnlessBackingOff(pool, a.machine, now, "lost machine ");
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
  StopUnlessBackingOff(pool, a.machine, now, "");
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
