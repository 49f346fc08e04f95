// `trainq status`: the status document (agent/results/status.h) from the
// store or a server, as JSON or as the terminal view, once or --watch.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "agent/cli/cli.h"
#include "agent/cli/read_client.h"
#include "agent/results/status.h"
#include "agent/results/table.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {

namespace {

// ", busy 3m10s": run time on the machines, next to their billed time (a
// machine with several slots can be busy longer than it was billed). Busy
// time counts runs leased by fleet workers; the in-process executor's runs
// are not tied to its machine row, so no busy time says nothing about them.
std::string BusyOf(TimeMs busy) { return busy > 0 ? ", busy " + FormatDuration(busy) : ""; }

// "$12.30 of $50.00 today, $120.00 of $800.00 this month; CAP REACHED: ..."
std::string BudgetText(const json& b) {
  std::vector<std::string> parts;
  if (b.value("per_day", 0.0) > 0) {
    parts.push_back(Money(b.value("spent_day", 0.0)) + " of " + Money(b.value("per_day", 0.0)) +
                    " today (UTC)");
  }
  if (b.value("per_month", 0.0) > 0) {
    parts.push_back(Money(b.value("spent_month", 0.0)) + " of " +
                    Money(b.value("per_month", 0.0)) + " this month");
  }
  std::string text = fmt::format("{}", fmt::join(parts, ", "));
  if (!b.value("cap", "").empty()) text += "; AT CAP, no boots: " + b.value("cap", "");
  return text;
}

BatchProgress CountsOfJson(const json& b) {
  BatchProgress p;
  for (int i = 0; i < kRunStateCount; ++i) {
    p.counts[i] = b["counts"].value(std::string(RunStateName(static_cast<RunState>(i))), 0);
  }
  return p;
}

std::string ProgressTextJson(const json& b) { return ProgressText(CountsOfJson(b)); }

bool IsActiveJson(const json& b) { return CountsOfJson(b).active(); }

std::string SummaryTextJson(const json& b) {
  const json& s = b["summary"];
  int n = s.value("n", 0);
  if (n == 0) return "-";
  double mean = s.value("mean", 0.0);
  if (n == 1) return FormatDouble(mean, 4) + " (n=1)";
  double sd = s["sd"].is_number() ? s["sd"].get<double>() : 0.0;
  std::string floor;
  if (s.contains("noise_floor") && s["noise_floor"]["floor"].is_number()) {
    floor = "; " + s["noise_floor"].value("short", "");
  }
  return FormatDouble(mean, 4) + " ± " + FormatDouble(sd, 4) + " (n=" + std::to_string(n) + floor +
         ")";
}

// "step 1350 · accuracy 0.9512 · loss 0.3100": a running run's latest points,
// the experiment's metric first, then loss, then up to two more.
std::string LatestText(const json& run) {
  if (!run.contains("latest") || !run["latest"].is_object()) return "";
  const json& l = run["latest"];
  const json& m = l["metrics"];
  std::string out;
  if (l["step"].is_number()) out = "step " + std::to_string(l["step"].get<std::int64_t>());
  std::vector<std::string> names;
  std::string metric = l.value("metric", "");
  if (m.contains(metric)) names.push_back(metric);
  if (metric != "loss" && m.contains("loss")) names.push_back("loss");
  for (const auto& [name, v] : m.items()) {
    if (names.size() >= 4) break;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const auto& n : names) {
    if (!m[n].is_number()) continue;
    out += (out.empty() ? "" : " · ") + n + " " + FormatDouble(m[n].get<double>(), 4);
  }
  return out;
}

// One machine under its pool: its state, and slots or how long it has been
// silent, booting or idle.
void RenderMachineLine(const json& m, TimeMs now, std::ostream& out) {
  TimeMs last_seen = m.value("last_seen_ms", TimeMs{0});
  std::string name = m.value("name", "");
  if (name.empty()) name = m.value("provider", "") + " " + m.value("provider_id", "");
  std::string state = m.value("state", "");
  out << "          " << name << ": ";
  if (m.value("silent", false) && (state == "ready" || state == "draining")) {
    out << "silent for " << FormatDuration(now - last_seen) << "\n";
    return;
  }
  out << state;
  if (state == "ready") {
    out << ", " << m.value("busy", 0) << "/" << m.value("slots", 0) << " slot(s) busy";
    if (m.contains("idle_ms") && m["idle_ms"].is_number()) {
      out << ", idle " << FormatDuration(m["idle_ms"].get<TimeMs>());
    }
  } else if (state == "requested" || state == "booting") {
    out << " for " << FormatDuration(now - m.value("booted_ms", now));
    // Why it is not up yet, as its provider says (a pod's scheduler message).
    if (auto why = m.value("last_error", ""); !why.empty()) out << ": " << OneLine(why, 160);
  } else {
    out << ", " << m.value("slots", 0) << " slot(s)";
  }
  out << "\n";
}

// "queue: ..." and "slots: ..." lines.
void RenderQueueLines(const json& j, const json& machines, std::ostream& out) {
  out << "queue:   ";
  for (int i = 0; i < kRunStateCount; ++i) {
    std::string name(RunStateName(static_cast<RunState>(i)));
    out << (i ? " · " : " ") << name << " " << j["counts"].value(name, std::int64_t{0});
  }
  out << "\n";
  std::int64_t slots = j["slots"].value("total", std::int64_t{0});
  out << "slots:    " << j["slots"].value("busy", std::int64_t{0}) << " busy / " << slots
      << " available";
  if (slots == 0 && machines.empty()) {
    // The fleet keeps no machine while nothing is queued (min 0), so this is
    // also what a running serve looks like between batches.
    out << " (no machine is up: `trainq serve` boots them while runs are queued)";
  }
  out << "\n";
}

// A pool's failed boots: how many, when the next boot may come, and the end
// of the last one's log.
void RenderPoolBoots(const json& b, const std::string& pool, TimeMs now, std::ostream& out) {
  int failed = b.value("failed", 0);
  if (b.value("failing", false)) {
    out << "          FAILING: " << failed << " boots in a row failed; no more boots until "
        << "its config changes, `trainq pools reset " << pool
        << "`, or a worker of the pool registers\n"
        << "          last: " << OneLine(b.value("error", ""), 160) << "\n";
  } else if (failed > 0) {
    out << "          " << failed << " failed boot(s) in a row; one machine at a time";
    if (b["next_boot_ms"].is_number()) {
      TimeMs next = b["next_boot_ms"].get<TimeMs>();
      if (next > now) out << ", next boot in " << FormatDuration(next - now);
    }
    out << "\n          last: " << OneLine(b.value("error", ""), 160) << "\n";
  }
  if (failed > 0 || b.value("failing", false)) {
    auto lines = Split(b.value("log_tail", ""), '\n');
    std::vector<std::string> kept;
    for (const auto& l : lines) {
      if (!Trim(l).empty()) kept.push_back(std::string(l));
    }
    size_t from = kept.size() > 5 ? kept.size() - 5 : 0;
    if (!kept.empty()) out << "          its log ends:\n";
    for (size_t i = from; i < kept.size(); ++i) {
      out << "            | " << OneLine(kept[i], 150) << "\n";
    }
  }
}

// One pool: machines by state, slots, cost, losses, provider and boot
// failures, budget, then its machines.
void RenderPool(const json& p, const json& machines, TimeMs now, std::ostream& out) {
  static constexpr std::string_view kStateOrder[] = {
      "ready", "booting", "requested", "draining", "stopping", "failed", "stopped"};
  std::string pool = p.value("pool", "");
  std::vector<std::string> parts;
  for (auto st : kStateOrder) {
    int n = p["machines"].value(std::string(st), 0);
    if (n > 0) parts.push_back(std::to_string(n) + " " + std::string(st));
  }
  out << "pool " << pool << ": "
      << (parts.empty() ? std::string("no machines") : fmt::format("{}", fmt::join(parts, ", ")));
  if (!parts.empty()) {
    out << "; slots " << p["slots"].value("busy", 0) << " busy / " << p["slots"].value("total", 0);
  }
  TimeMs billed = p.value("billed_ms", TimeMs{0});
  TimeMs busy = p.value("busy_ms", TimeMs{0});
  if (p.value("machines_booted", 0) > 0) {
    out << "; billed " << FormatDuration(billed) << BusyOf(busy) << ", cost "
        << Money(p.value("cost", 0.0));
  }
  out << "\n";
  if (p.contains("lost") && p["lost"].is_object()) {
    const json& l = p["lost"];
    const json& last = l["last"];
    TimeMs at = last.value("at_ms", now);
    out << "          lost in the last hour: " << l.value("last_hour", 0) << "; last "
        << last.value("name", "") << " " << FormatDuration(now - at) << " ago ("
        << OneLine(last.value("reason", ""), 120) << ")\n";
  }
  if (p.value("failing", false)) {
    out << "          provider failing (" << p.value("provider_failures", 0) << " calls in a row";
    if (p["provider_next_retry_ms"].is_number()) {
      TimeMs retry = p["provider_next_retry_ms"].get<TimeMs>();
      out << "; next try " << (retry > now ? "in " + FormatDuration(retry - now) : "now");
    }
    out << "): " << OneLine(p.value("provider_error", ""), 120) << "\n";
  }
  if (p.contains("boots") && p["boots"].is_object()) RenderPoolBoots(p["boots"], pool, now, out);
  if (p.contains("budget") && p["budget"].is_object()) {
    out << "          budget: " << BudgetText(p["budget"]) << "\n";
  }
  for (const auto& m : machines) {
    if (m.value("pool", "") == pool) RenderMachineLine(m, now, out);
  }
}

// Every pool, the budget of all pools and what all machines cost.
void RenderPools(const json& j, const json& machines, TimeMs now, std::ostream& out) {
  for (const auto& p : j["pools"]) RenderPool(p, machines, now, out);
  if (j.contains("budget") && j["budget"].is_object()) {
    out << "budget:   all pools: " << BudgetText(j["budget"]) << "\n";
  }
  const json& c = j["costs"];
  if (c.value("machines_booted", 0) > 0) {
    TimeMs billed = c.value("billed_ms", TimeMs{0});
    TimeMs busy = c.value("busy_ms", TimeMs{0});
    out << "machines: billed " << FormatDuration(billed) << BusyOf(busy) << ", cost "
        << Money(c.value("cost", 0.0)) << " in all (" << c.value("machines_booted", 0)
        << " machine(s); `trainq machines --all` for each)\n";
  }
}

void RenderRunning(const json& running, std::ostream& out) {
  if (running.empty()) return;
  out << "running:\n";
  Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "ATTEMPT", "ELAPSED", "WORKER", "LATEST"});
  for (const auto& r : running) {
    t.Add({std::to_string(r.value("id", std::int64_t{0})),
           std::to_string(r.value("batch", std::int64_t{0})), r.value("experiment", ""),
           std::to_string(r.value("seed", std::int64_t{0})),
           std::to_string(r.value("attempts", 0)) + "/" + std::to_string(r.value("max_attempts", 0)),
           r["started_ms"].is_number() ? FormatDuration(r.value("elapsed_ms", TimeMs{0}))
                                       : "starting",
           r.value("worker", ""), LatestText(r)});
  }
  out << t.Render("  ");
}

// The five newest pushes.
void RenderPushes(const json& pushes, std::ostream& out) {
  if (pushes.empty()) return;
  out << "pushes:\n";
  Table t({"PUSH", "SOURCE", "REF", "COMMIT", "STATE", "NOTE"});
  size_t shown = 0;
  for (const auto& p : pushes) {
    if (++shown > 5) break;
    std::string ref = p.value("ref", "");
    for (std::string_view prefix : {"refs/heads/", "refs/tags/"}) {
      if (ref.starts_with(prefix)) ref = ref.substr(prefix.size());
    }
    std::string state = p.value("state", "");
    std::string note = p.value("error", "");
    if (state == "pending" && !note.empty()) {
      note = "retrying (attempt " + std::to_string(p.value("attempts", 0)) + "): " + note;
    } else if (note.empty()) {
      note = p.value("result", "");
    }
    t.Add({std::to_string(p.value("id", std::int64_t{0})), p.value("source", ""), ref,
           ShortSha(p.value("after", ""), kReportShaChars), state, OneLine(note, 80)});
  }
  out << t.Render("  ");
}

// Why runs wait, then the newest batches, then what the batch table has no
// column for: determinism checks and drift.
void RenderBatches(const json& j, TimeMs now, std::ostream& out) {
  const json& batches = j["batches"];
  if (batches.empty()) {
    out << "batches:  none yet (queue some with `trainq submit --repo DIR`)\n";
    return;
  }
  if (j.contains("waiting") && !j["waiting"].empty()) {
    out << "waiting:\n";
    for (const auto& w : j["waiting"]) {
      out << "  batch " << w.value("batch", std::int64_t{0}) << " ("
          << w.value("experiment", "") << "): " << w.value("runs", std::int64_t{0})
          << " run(s): " << w.value("reason", "") << "\n";
    }
  }
  out << "batches:\n";
  Table t({"BATCH", "COMMIT", "EXPERIMENT", "PROGRESS", "METRIC (mean ± sd)"});
  // A terminal shows the newest batches; --json and `trainq report` have them all.
  constexpr size_t kShown = 20;
  // batches_total: the list's full length when only the newest were read.
  const size_t total =
      std::max<size_t>(batches.size(), j.value("batches_total", std::int64_t{0}));
  size_t hidden = total > kShown ? total - kShown : 0;
  size_t i = 0;
  for (const auto& b : batches) {
    if (i++ >= kShown) break;
    std::string progress = ProgressTextJson(b);
    if (b.contains("eta_ms") && IsActiveJson(b)) {
      // "eta 12m": from the measured durations of the experiment's runs.
      TimeMs eta = b["eta_ms"].is_number() ? b["eta_ms"].get<TimeMs>() : -1;
      progress += eta >= 0 ? ", eta " + FormatDuration(std::max<TimeMs>(0, eta - now)) : ", eta ?";
    }
    t.Add({std::to_string(b.value("id", std::int64_t{0})),
           ShortSha(b.value("commit", ""), kReportShaChars), b.value("experiment", ""), progress,
           b.value("metric", "") + " " + SummaryTextJson(b)});
  }
  out << t.Render("  ");
  if (hidden) {
    out << "  ... and " << hidden << " more (trainq status --json, trainq report)\n";
  }
  i = 0;
  for (const auto& b : batches) {
    if (i++ >= kShown) break;
    for (const char* key : {"determinism", "drift"}) {
      if (b.contains(key) && b[key].is_string()) {
        out << "  batch " << b.value("id", std::int64_t{0}) << " " << b.value("experiment", "")
            << ": " << b[key].get<std::string>() << "\n";
      }
    }
  }
}

// The terminal view of StatusJson's document (the same whether it came from
// the store or from a server's /api/v1/status), section by section.
void RenderStatusText(const json& j, std::ostream& out) {
  const TimeMs now = j.value("now_ms", TimeMs{0});
  const json no_machines = json::array();
  const json& machines = j.contains("machines") ? j["machines"] : no_machines;
  RenderQueueLines(j, machines, out);
  if (!j.contains("pools")) {  // a server from before pools
    for (const auto& m : machines) RenderMachineLine(m, now, out);
  } else {
    RenderPools(j, machines, now, out);
  }
  RenderRunning(j["running"], out);
  RenderPushes(j.contains("pushes") ? j["pushes"]["recent"] : json::array(), out);
  RenderBatches(j, now, out);
}

Result<json> FetchServerStatus(const std::string& server, const std::string& token_file) {
  std::string base = server;
  while (!base.empty() && base.back() == '/') base.pop_back();
  ASSIGN_OR_RETURN(auto token, ReadToken(token_file, server));
  CurlHttpClient http;
  ASSIGN_OR_RETURN(auto resp, http.Send({"GET", base + "/api/v1/status",
                                         {{"Authorization", "Bearer " + token}}, "", 10'000}));
  if (!resp.ok()) {
    std::string reason;
    auto err = json::parse(resp.body, nullptr, false);
    if (err.is_object() && err.contains("reason") && err["reason"].is_string()) {
      reason = ": " + err["reason"].get<std::string>();
    }
    return Fail(resp.status >= 500 ? ErrorKind::kUnavailable : ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base) + ": HTTP " + std::to_string(resp.status) +
                    " from /api/v1/status" + reason);
  }
  json j = json::parse(resp.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("counts")) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base) + ": /api/v1/status did not answer a status document");
  }
  return j;
}

}  // namespace

namespace {

// Nothing queued, leased, running or waiting for a retry.
bool IdleJson(const json& j) {
  for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
    if (j["counts"].value(std::string(RunStateName(s)), std::int64_t{0}) > 0) return false;
  }
  return true;
}

// `trainq status --watch`: one frame per interval. On a terminal each frame
// is drawn over the last (cursor home, every line cleared to its end, the
// rest of the screen cleared), so the view updates without scrolling;
// elsewhere (a pipe, a log) frames follow each other.
Status WatchStatus(const StatusOptions& o, const Clock& clock, std::ostream& out) {
  std::optional<Store> store;
  if (o.server.empty()) {
    ASSIGN_OR_RETURN(auto s, OpenExisting(o.db));
    store.emplace(std::move(s));
  }
  bool first = true;
  while (true) {
    json j;
    if (store) {
      ASSIGN_OR_RETURN(j, StatusJson(*store, o.db, clock.Now(), 20));
    } else {
      ASSIGN_OR_RETURN(j, FetchServerStatus(o.server, o.token_file));
    }
    const bool idle = IdleJson(j);
    std::ostringstream frame;
    frame << "trainq status, every " << fmt::format("{:g}s", o.interval_ms / 1000.0) << " at "
          << FormatTimestamp(clock.Now()) << " UTC"
          << (o.until_idle ? " until nothing is left to run" : "") << " (Ctrl-C to stop)\n";
    RenderStatusText(j, frame);
    if (o.terminal) {
      out << (first ? "\x1b[H\x1b[2J" : "\x1b[H");
      std::string text = frame.str();
      // A frame taller than the terminal would scroll: it is cut to fit.
      int lines = 0;
      for (std::size_t at = 0; at < text.size();) {
        std::size_t nl = text.find('\n', at);
        if (nl == std::string::npos) nl = text.size();
        if (o.rows > 1 && ++lines >= o.rows) {
          out << "... (the terminal is too short for the rest)\x1b[K";
          break;
        }
        out << std::string_view(text).substr(at, nl - at) << "\x1b[K\n";
        at = nl + 1;
      }
      out << "\x1b[J";
    } else {
      out << (first ? "" : "\n") << frame.str();
    }
    out.flush();
    first = false;
    if ((o.until_idle && idle) || (o.stop && o.stop->load())) break;
    clock.SleepFor(o.interval_ms);
    if (o.stop && o.stop->load()) break;
  }
  return {};
}

}  // namespace

Status CmdStatus(const StatusOptions& o, const Clock& clock, std::ostream& out) {
  if (o.watch) {
    if (o.json) return Fail(ErrorKind::kInvalidArgument, "--watch draws text; leave out --json");
    if (o.interval_ms < 100) {
      return Fail(ErrorKind::kInvalidArgument, "--interval: at least 0.1 seconds");
    }
    return WatchStatus(o, clock, out);
  }
  json j;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(j, FetchServerStatus(o.server, o.token_file));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    // The text view shows the newest 20 batches: read only those (and count
    // the rest), so a deep queue costs what the screen shows.
    ASSIGN_OR_RETURN(j, StatusJson(store, o.db, clock.Now(), o.json ? 0 : 20));
  }
  if (o.json) {
    out << j.dump(2) << "\n";
    return {};
  }
  RenderStatusText(j, out);
  return {};
}

void AddStatusCommand(CLI::App& app, const CliContext& ctx) {
  auto status = std::make_shared<StatusOptions>();
  auto* c_status = app.add_subcommand("status", "Queue depth, running runs, slots and batch progress");
  c_status->add_flag("--json", status->json, "Print as JSON");
  AddServerOptions(c_status, &status->server, &status->token_file);
  auto status_interval_s = std::make_shared<double>(2.0);
  auto* watch_flag = c_status->add_flag(
      "--watch", status->watch, "Redraw every --interval seconds (in place on a terminal) until Ctrl-C");
  c_status->add_option("--interval", *status_interval_s, "Seconds between redraws with --watch")
      ->check(CLI::PositiveNumber)
      ->needs(watch_flag);
  c_status->add_flag("--until-idle", status->until_idle,
                     "With --watch: stop once nothing is queued, running or waiting for a retry")
      ->needs(watch_flag);
  c_status->callback([=] {
    status->db = *ctx.db;
    status->interval_ms = static_cast<TimeMs>(*status_interval_s * 1000);
    if (status->watch) {
      CatchStopSignals();
      status->stop = &StopFlag();
      status->terminal = isatty(STDOUT_FILENO) != 0;
      struct winsize ws{};
      if (status->terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) status->rows = ws.ws_row;
    }
    *ctx.exit_code = ReportStatus(CmdStatus(*status, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
