// Fleet's spend and budget: the UTC day's and month's spend per pool and
// overall (billed time x hourly_cost, from the machine rows), and what a cap
// that holds boots back says in the serve log, the pool_state row and
// `trainq status`.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/daemon/fleet.h"
#include "cloud/autoscaler.h"
#include "queue/machines.h"

namespace trainq {

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

std::string BudgetNote(const std::string& pool, const std::string& cap) {
  if (cap.starts_with("overall ")) return "pool " + pool + " held back: the " + cap;
  return "pool " + pool + " at its " + cap;
}
}  // namespace trainq
