// `trainq simulate TRACE`: replays a trace of pushes through the autoscaler
// (cloud/autoscaler.h) and, beside it, a fixed idle-timeout policy, on a
// virtual clock (cloud/simulate.h documents the trace format and the model).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "agent/cli/cli.h"
#include "cloud/simulate.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

namespace {

struct SimulateOptions {
  std::string trace;
  std::string boot_delay = "90s";
  std::string tick = "10s";
  std::string idle_timeout = "10m";
  bool json = false;
  bool batches = false;
  int days = 0;
};

std::string Hours(TimeMs ms) {
  return FormatDouble(static_cast<double>(ms) / 3600'000.0, 1) + " h";
}

json ResultJson(const cloud::SimResult& r) {
  TimeMs lat = 0, ideal = 0;
  for (const auto& b : r.batches) {
    lat += b.latency_ms;
    ideal += b.ideal_ms;
  }
  size_t n = std::max<size_t>(1, r.batches.size());
  return {{"billed_s", r.billed_ms / 1000},
          {"busy_s", r.busy_ms / 1000},
          {"billed_over_busy", r.billed_over_busy()},
          {"cost", r.cost},
          {"peak_machines", r.peak_machines},
          {"boots", r.boots},
          {"mean_latency_s", lat / 1000 / static_cast<TimeMs>(n)},
          {"mean_ideal_s", ideal / 1000 / static_cast<TimeMs>(n)},
          {"latency_over_ideal_mean", r.mean_latency_ratio()},
          {"latency_over_ideal_total", r.total_latency_ratio()},
          {"latency_over_ideal_worst", r.worst_latency_ratio()},
          {"runs_unfinished", r.unfinished_runs},
          {"failed_boots", r.failed_boots},
          {"failing_pools", r.failing_pools}};
}

// --days: the trace's day repeated, the autoscaler with its safeguards (boot
// back-off, failing pools, budgets) against the same autoscaler without them.
Status SimulateDays(const SimulateOptions& o, const cloud::Trace& trace, cloud::SimOptions sim,
                    std::ostream& out) {
  sim.days = o.days;
  sim.safeguards = true;
  ASSIGN_OR_RETURN(cloud::SimResult a, cloud::Simulate(trace, {}, sim));
  sim.safeguards = false;
  ASSIGN_OR_RETURN(cloud::SimResult b, cloud::Simulate(trace, {}, sim));
  if (o.json) {
    out << json{{"trace", o.trace},
                {"days", o.days},
                {"runs", a.runs},
                {"boot_delay_s", sim.boot_delay_ms / 1000},
                {"autoscaler", ResultJson(a)},
                {"without_safeguards", ResultJson(b)}}
               .dump(2)
        << "\n";
    return {};
  }
  out << "trace " << o.trace << " over " << o.days << " day(s): " << a.runs << " runs; boot delay "
      << FormatDuration(sim.boot_delay_ms) << ", per-second billing\n";
  for (size_t i = 0; i < trace.pools.size(); ++i) {
    const auto& p = trace.pools[i];
    out << "pool " << p.name << ": max " << p.max << ", " << p.slots << " slots, boot_timeout "
        << FormatDuration(p.boot_timeout_ms) << ", $" << FormatDouble(p.hourly_cost, 2) << "/h";
    if (i < trace.broken.size() && trace.broken[i]) out << ", machines never register";
    if (p.budget_per_day > 0) out << ", budget $" << FormatDouble(p.budget_per_day, 2) << "/day";
    if (p.budget_per_month > 0) {
      out << ", budget $" << FormatDouble(p.budget_per_month, 2) << "/month";
    }
    out << "\n";
  }
  out << "\n";
  auto row = [&](const std::string& name, const std::string& x, const std::string& y) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-28s %-16s %s\n", name.c_str(), x.c_str(), y.c_str());
    out << buf;
  };
  auto failing = [](const cloud::SimResult& r) {
    std::string s;
    for (const auto& p : r.failing_pools) s += (s.empty() ? "" : ",") + p;
    return s.empty() ? std::string("-") : s;
  };
  row("", "autoscaler", "no back-off, no cap");
  row("billed machine time", Hours(a.billed_ms), Hours(b.billed_ms));
  row("busy machine time", Hours(a.busy_ms), Hours(b.busy_ms));
  row("cost", "$" + FormatDouble(a.cost, 2), "$" + FormatDouble(b.cost, 2));
  row("boots", std::to_string(a.boots), std::to_string(b.boots));
  row("failed boots", std::to_string(a.failed_boots), std::to_string(b.failed_boots));
  row("runs done", std::to_string(a.runs - a.unfinished_runs),
      std::to_string(b.runs - b.unfinished_runs));
  row("pools failing at the end", failing(a), failing(b));
  return {};
}

Status CmdSimulate(const SimulateOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(o.trace));
  ASSIGN_OR_RETURN(cloud::Trace trace, cloud::ParseTrace(text, o.trace));
  cloud::SimOptions sim;
  auto seconds = [](const std::string& flag, const std::string& v) -> Result<TimeMs> {
    auto s = ParseDurationSeconds(v);
    if (!s) return Fail(ErrorKind::kInvalidArgument, flag + ": " + s.error().message);
    return *s * 1000;
  };
  ASSIGN_OR_RETURN(sim.boot_delay_ms, seconds("--boot-delay", o.boot_delay));
  ASSIGN_OR_RETURN(sim.tick_ms, seconds("--tick", o.tick));
  if (o.days < 0) return Fail(ErrorKind::kInvalidArgument, "--days: expected 0 or more");
  if (o.days > 0) return SimulateDays(o, trace, sim, out);
  cloud::SimPolicy autoscaler;
  cloud::SimPolicy fixed{cloud::SimPolicy::Kind::kIdleTimeout, 0};
  ASSIGN_OR_RETURN(fixed.idle_timeout_ms, seconds("--idle-timeout", o.idle_timeout));
  ASSIGN_OR_RETURN(cloud::SimResult a, cloud::Simulate(trace, autoscaler, sim));
  ASSIGN_OR_RETURN(cloud::SimResult b, cloud::Simulate(trace, fixed, sim));

  if (o.json) {
    out << json{{"trace", o.trace},
                {"pushes", trace.pushes},
                {"batches", trace.batches.size()},
                {"runs", a.runs},
                {"boot_delay_s", sim.boot_delay_ms / 1000},
                {"autoscaler", ResultJson(a)},
                {"idle_timeout", ResultJson(b)}}
               .dump(2)
        << "\n";
    return {};
  }
  out << "trace " << o.trace << ": " << trace.pushes << " pushes, " << trace.batches.size()
      << " batches, " << a.runs << " runs; boot delay " << FormatDuration(sim.boot_delay_ms)
      << ", per-second billing\n";
  for (const auto& p : trace.pools) {
    out << "pool " << p.name << ": min " << p.min << ", max " << p.max << ", " << p.slots
        << " slots, idle_grace " << FormatDuration(p.idle_grace_ms) << ", $"
        << FormatDouble(p.hourly_cost, 2) << "/h\n";
  }
  out << "\n";
  std::string fixed_name = "idle-timeout " + FormatDuration(fixed.idle_timeout_ms);
  auto row = [&](const std::string& name, const std::string& x, const std::string& y) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-28s %-14s %s\n", name.c_str(), x.c_str(), y.c_str());
    out << buf;
  };
  auto mean_ms = [](const cloud::SimResult& r, bool ideal) {
    TimeMs sum = 0;
    for (const auto& x : r.batches) sum += ideal ? x.ideal_ms : x.latency_ms;
    return r.batches.empty() ? 0 : sum / static_cast<TimeMs>(r.batches.size());
  };
  row("", "autoscaler", fixed_name);
  row("billed machine time", Hours(a.billed_ms), Hours(b.billed_ms));
  row("busy machine time", Hours(a.busy_ms), Hours(b.busy_ms));
  row("billed / busy", FormatDouble(a.billed_over_busy(), 3),
      FormatDouble(b.billed_over_busy(), 3));
  row("cost", "$" + FormatDouble(a.cost, 2), "$" + FormatDouble(b.cost, 2));
  row("latency, mean", FormatDuration(mean_ms(a, false)), FormatDuration(mean_ms(b, false)));
  row("ideal latency, mean", FormatDuration(mean_ms(a, true)), FormatDuration(mean_ms(b, true)));
  row("latency / ideal, mean", FormatDouble(a.mean_latency_ratio(), 3),
      FormatDouble(b.mean_latency_ratio(), 3));
  row("latency / ideal, all runs", FormatDouble(a.total_latency_ratio(), 3),
      FormatDouble(b.total_latency_ratio(), 3));
  row("latency / ideal, worst", FormatDouble(a.worst_latency_ratio(), 3),
      FormatDouble(b.worst_latency_ratio(), 3));
  row("peak machines", std::to_string(a.peak_machines), std::to_string(b.peak_machines));
  row("boots", std::to_string(a.boots), std::to_string(b.boots));
  if (o.batches) {
    out << "\npushed    experiment             autoscaler idle-timeout   ideal  ratio\n";
    for (size_t i = 0; i < a.batches.size() && i < b.batches.size(); ++i) {
      const auto& x = a.batches[i];
      const long long sec = x.pushed_ms / 1000;
      char buf[256];
      std::snprintf(
          buf, sizeof buf, "%02lld:%02lld:%02lld  %-20s %10s %10s %10s  %s\n", sec / 3600,
          sec / 60 % 60, sec % 60, x.experiment.c_str(), FormatDuration(x.latency_ms).c_str(),
          FormatDuration(b.batches[i].latency_ms).c_str(), FormatDuration(x.ideal_ms).c_str(),
          FormatDouble(static_cast<double>(x.latency_ms) / static_cast<double>(x.ideal_ms), 3)
              .c_str());
      out << buf;
    }
  }
  return {};
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<SimulateOptions>();
  auto* c = app.add_subcommand(
      "simulate", "Replay a trace of pushes through the autoscaler on a virtual clock");
  c->add_option("TRACE", o->trace, "Trace file (format: cloud/simulate.h; bench/traces/)")
      ->required();
  c->add_option("--boot-delay", o->boot_delay, "Boot to ready")->capture_default_str();
  c->add_option("--tick", o->tick, "How often the autoscaler runs")->capture_default_str();
  c->add_option("--idle-timeout", o->idle_timeout, "The baseline policy's idle timeout")
      ->capture_default_str();
  c->add_flag("--json", o->json, "Print as JSON");
  c->add_option("--days", o->days,
                "Repeat the trace's day this many times and compare the autoscaler with and "
                "without its boot back-off and budgets (0: until every run is done)");
  c->add_flag("--batches", o->batches, "Also print each batch's latency");
  c->callback([o, exit_code] {
    Status st = CmdSimulate(*o, std::cout);
    if (!st) {
      std::cerr << "trainq: error: " << st.error().message << "\n";
      *exit_code = 1;
    }
  });
}

}  // namespace trainq
