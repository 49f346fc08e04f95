#include "agent/triggers/notify.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>

#include "agent/repo/manifest.h"  // IsReproExperiment, ReproTargetOf
#include "agent/repo/mirror.h"
#include "agent/results/analysis.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/forge_status.h"  // CommitPageUrl
#include "agent/triggers/mlflow.h"
#include "core/crypto.h"
#include "agent/triggers/run_cursor.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

using nlohmann::json;

constexpr const char* kTargetPrefix = "notify:";
constexpr const char* kCursorMark = "notify:cursor";
constexpr const char* kConditionPrefix = "notify:cond:";

// "2026-12-07T15:04:05Z".
std::string IsoTime(TimeMs ms) {
  std::string t = FormatTimestamp(ms);  // "2026-12-07 15:04:05"
  if (t.size() > 10) t[10] = 'T';
  return t + "Z";
}

// "2026-12-07" / "2026-12" in UTC.
std::string UtcDay(TimeMs ms) { return FormatTimestamp(ms).substr(0, 10); }
std::string UtcMonth(TimeMs ms) { return FormatTimestamp(ms).substr(0, 7); }

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "acme/model main 1a2b3c4 lstm": what a batch event is about.
std::string BatchPlace(const NotifyEvent& e) {
  std::string where = e.project;
  if (where.empty()) {
    // A `trainq submit` repository: its folder's name.
    std::string_view u = e.repository;
    while (u.ends_with("/")) u.remove_suffix(1);
    if (u.ends_with(".git")) u.remove_suffix(4);
    where = std::string(u.substr(u.find_last_of('/') == std::string_view::npos ? 0 : u.find_last_of('/') + 1));
  }
  if (!e.branch.empty()) where += "@" + e.branch;
  return where + " " + ShortSha(e.sha) + " " + e.experiment;
}

std::string Money(double v) { return "$" + FormatDouble(v, 2); }

}  // namespace

json NotifyEventJson(const NotifyEvent& e) {
  json j = {{"schema", kNotifySchema},
            {"event", e.kind},
            {"key", e.key},
            {"at", IsoTime(e.at_ms)},
            {"at_ms", e.at_ms},
            {"summary", e.summary},
            {"url", e.url}};
  if (!e.repository.empty() || !e.sha.empty()) {
    j["repository"] = {{"url", e.repository}, {"project", e.project}};
    j["commit"] = {{"sha", e.sha}, {"branch", e.branch}};
  }
  if (!e.experiment.empty()) j["experiment"] = e.experiment;
  if (!e.pool.empty()) j["pool"] = e.pool;
  j["details"] = e.details;
  return j;
}

std::string NotifyWebhookBody(const json& event, const std::string& delivery_id) {
  json body = event;
  body["delivery"] = delivery_id;
  return body.dump();
}

HttpRequest NotifyWebhookRequest(const NotifyTarget& t, const json& event,
                                 const std::string& delivery_id) {
  HttpRequest r;
  r.method = "POST";
  r.url = t.url;
  r.body = NotifyWebhookBody(event, delivery_id);
  r.headers = {{"Content-Type", "application/json"},
               {"User-Agent", "trainq-notify"},
               {"X-Trainq-Event", Str(event, "event")},
               {"X-Trainq-Delivery", delivery_id},
               {"X-Trainq-Signature-256", "sha256=" + HmacSha256Hex(t.secret.value, r.body)}};
  return r;
}

namespace {

// Slack reads &, < and > as markup (<!channel> would ping everyone): escaped,
// as Slack's "Formatting text" asks.
std::string SlackEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string_view EventMark(std::string_view kind) {
  if (kind == "worse") return ":chart_with_downwards_trend:";
  if (kind == "drift") return ":warning:";
  if (kind == "not_reproducible") return ":game_die:";
  if (kind == "dead_runs") return ":x:";
  if (kind == "pool_failing") return ":rotating_light:";
  if (kind == "budget") return ":moneybag:";
  if (kind == "queue_stuck") return ":hourglass:";
  return ":information_source:";
}

}  // namespace

std::string SlackText(const json& event) {
  const std::string kind = Str(event, "event");
  // Ours are one line; a long one (an error quoted in it) is cut before
  // escaping, at a character boundary, so no entity or UTF-8 character is
  // split (Slack truncates past 40,000 characters; this stays far below).
  std::string summary = Str(event, "summary");
  if (summary.size() > 2'000) {
    size_t cut = 2'000;
    while (cut > 0 && (static_cast<unsigned char>(summary[cut]) & 0xC0) == 0x80) --cut;
    summary = summary.substr(0, cut) + "...";
  }
  std::string text = std::string(EventMark(kind)) + " *" + SlackEscape(kind) + "* " +
                     SlackEscape(summary);
  const std::string url = Str(event, "url");
  // A URL inside <...|...> may not hold '|' or '>': public_url is checked,
  // and the rest of the path is hex, names and numbers; escaped all the same.
  if (!url.empty()) text += " <" + SlackEscape(url) + "|open in trainq>";
  return text;
}

HttpRequest SlackRequest(const NotifyTarget& t, const json& event) {
  HttpRequest r;
  r.method = "POST";
  r.url = t.slack_url.value;
  r.body = json{{"text", SlackText(event)}}.dump();
  r.headers = {{"Content-Type", "application/json"}, {"User-Agent", "trainq-notify"}};
  return r;
}

HttpRequest NotifyRequest(const NotifyTarget& t, const json& event,
                          const std::string& delivery_id) {
  return t.kind == NotifyTarget::Kind::kSlack ? SlackRequest(t, event)
                                              : NotifyWebhookRequest(t, event, delivery_id);
}

NotifyEvent SampleNotifyEvent(const ServerConfig& config, TimeMs now) {
  NotifyEvent e;
  e.kind = "test";
  e.key = "test:" + std::to_string(now);
  e.at_ms = now;
  e.summary = "a test of this target from `trainq notify test`: the events it gets look like this";
  e.url = config.public_url.empty() ? "" : config.public_url + "/";
  e.details = {{"sample", true}};
  return e;
}

namespace {

// "the Slack webhook of ml-alerts" / "the webhook ops (https://ops.example/hook)":
// a Slack URL is a secret and never appears in a message.
std::string TargetText(const NotifyTarget& t) {
  if (t.kind == NotifyTarget::Kind::kSlack) return "the Slack webhook of " + t.name;
  return "the webhook " + t.name + " (" + UrlForLog(t.url) + ")";
}

std::string ScrubUrl(std::string msg, const NotifyTarget& t) {
  if (t.kind != NotifyTarget::Kind::kSlack) return msg;
  for (const std::string& u : {t.send_url(), UrlForLog(t.send_url())}) {
    if (u.empty()) continue;
    for (size_t at; (at = msg.find(u)) != std::string::npos;) msg.replace(at, u.size(), "<url>");
  }
  return msg;
}

struct SendOutcome {
  bool ok = false;
  bool permanent = false;          // retrying will not help (a 4xx but 408/429)
  std::optional<TimeMs> retry_after_ms;  // a 429's Retry-After
  std::string error;
};

SendOutcome Send(const NotifyTarget& t, const json& event, const std::string& delivery_id,
                 HttpClient& http, TimeMs timeout_ms) {
  HttpRequest req = NotifyRequest(t, event, delivery_id);
  req.timeout_ms = timeout_ms;
  auto resp = http.Send(req);
  SendOutcome out;
  if (!resp) {
    // A webhook's message names its URL already; a Slack one's is scrubbed.
    out.error = ScrubUrl(resp.error().message, t);
    if (t.kind == NotifyTarget::Kind::kSlack) out.error += " (" + TargetText(t) + ")";
    return out;
  }
  if (resp->ok()) {
    out.ok = true;
    return out;
  }
  std::string body = resp->body.substr(0, 200);
  for (char& c : body) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  out.error = "HTTP " + std::to_string(resp->status) + " from " + TargetText(t) +
              (body.empty() ? "" : ": " + ScrubUrl(body, t));
  out.permanent = resp->status >= 400 && resp->status < 500 && resp->status != 408 &&
                  resp->status != 429;
  if (resp->status == 429) {
    if (auto ra = resp->Header("Retry-After")) {
      char* end = nullptr;
      long s = std::strtol(ra->c_str(), &end, 10);
      if (end != ra->c_str() && s >= 0) out.retry_after_ms = std::min<long>(s, 3600) * 1000L;
    }
  }
  return out;
}

}  // namespace

Status SendNotifyNow(const NotifyTarget& t, const NotifyEvent& event, HttpClient& http,
                     TimeMs timeout_ms) {
  auto id = RandomHex(16);
  if (!id) return std::unexpected(id.error());
  auto out = Send(t, NotifyEventJson(event), *id, http, timeout_ms);
  if (out.ok) return {};
  return Fail(out.permanent ? ErrorKind::kInvalidArgument : ErrorKind::kUnavailable, out.error);
}

Result<json> NotifyTargetsJson(Store& store, const ServerConfig& config) {
  ASSIGN_OR_RETURN(auto sums, store.outbox().Summaries(kTargetPrefix));
  auto opt = [](const std::optional<TimeMs>& v) { return v ? json(*v) : json(); };
  json out = json::array();
  for (const auto& t : config.notify) {
    json j = {{"name", t.name},
              {"kind", t.kind == NotifyTarget::Kind::kSlack ? "slack" : "webhook"},
              {"to", t.kind == NotifyTarget::Kind::kSlack ? "Slack webhook from " + t.slack_url.source
                                                          : UrlForLog(t.url)},
              {"events", t.on},
              {"pending", 0},
              {"delivered", 0},
              {"gave_up", 0},
              {"last_delivered_ms", nullptr},
              {"last_delivered_event", ""},
              {"last_error_ms", nullptr},
              {"last_error", ""}};
    for (const auto& s : sums) {
      if (s.target != t.outbox_target()) continue;
      j["pending"] = s.pending;
      j["delivered"] = s.delivered;
      j["gave_up"] = s.gave_up;
      j["last_delivered_ms"] = opt(s.last_delivered_ms);
      j["last_delivered_event"] = s.last_delivered_kind;
      j["last_error_ms"] = opt(s.last_error_ms);
      j["last_error"] = s.last_error;
    }
    out.push_back(std::move(j));
  }
  return out;
}

// The scanner -----------------------------------------------------------------

NotifyScanner::NotifyScanner(Store& store, const ServerConfig& config, const Clock& clock,
                             NotifyOptions options)
    : store_(store), config_(config), clock_(clock), options_(std::move(options)) {}

const RepoConfig* NotifyScanner::RepoOf(const std::string& store_url) const {
  if (const RepoConfig* r = config_.FindRepo(store_url)) return r;
  if (options_.data_dir.empty()) return nullptr;
  for (const auto& r : config_.repositories) {
    if (Mirror::PathFor(options_.data_dir, r.url) == store_url) return &r;
  }
  return nullptr;
}

Result<int> NotifyScanner::Emit(const NotifyEvent& e) {
  int written = 0;
  std::string payload;
  for (const auto& t : config_.notify) {
    if (!t.Wants(e.kind) || !t.Matches(e.project, e.repository, e.branch, e.experiment)) continue;
    if (payload.empty()) payload = NotifyEventJson(e).dump();
    ASSIGN_OR_RETURN(auto id, RandomHex(16));
    ASSIGN_OR_RETURN(bool w, store_.outbox().Enqueue(t.outbox_target(), e.key, e.kind, id, payload,
                                                     e.at_ms));
    if (w) {
      ++written;
      spdlog::info("notify {}: {} {}", t.name, e.kind, e.summary);
    }
  }
  return written;
}

Result<int> NotifyScanner::Step() {
  if (config_.notify.empty()) return 0;
  const TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(int a, ScanBatches(now));
  ASSIGN_OR_RETURN(int b, ScanConditions(now));
  return a + b;
}

Result<int> NotifyScanner::ScanBatches(TimeMs now) {
  // The cursor: (finished_ms, run id) of the last run looked at. The first
  // scan ever starts now: history from before notifications were set up is
  // not news.
  ASSIGN_OR_RETURN(auto cursor, ReadRunCursor(store_.outbox(), kCursorMark, now));
  ASSIGN_OR_RETURN(auto runs, store_.runs().RunsFinishedAfter(cursor.after_ms, cursor.after_id, 500));
  if (runs.empty()) return 0;
  // The commits whose family may have a new answer: those of the batches
  // whose runs ended, of the batches that take them as baseline, and for a
  // determinism companion, its experiment's.
  std::set<std::int64_t> batch_ids;
  for (const auto& r : runs) {
    batch_ids.insert(r.batch_id);
    ASSIGN_OR_RETURN(auto heads, store_.outbox().BatchesWithBaseline(r.batch_id));
    batch_ids.insert(heads.begin(), heads.end());
  }
  std::set<std::pair<std::string, std::string>> commits;  // (repo_url, sha)
  for (auto id : batch_ids) {
    ASSIGN_OR_RETURN(auto b, store_.runs().Batch(id));
    if (b) commits.emplace(b->repo_url, b->sha);
  }
  int written = 0;
  std::map<std::string, std::vector<BatchProgress>> drift_cache;
  for (const auto& [repo_url, sha] : commits) {
    ASSIGN_OR_RETURN(auto family, CommitFamily(store_, repo_url, sha));
    if (family.empty()) continue;
    // With a correction, a verdict depends on every member: wait for all.
    bool all_done = true;
    for (const auto& m : family) {
      if (m.unchanged()) continue;
      if (m.head.active() || (m.base && m.base->active())) all_done = false;
    }
    auto comparisons = CompareFamily(family, /*compare_running=*/false);
    const RepoConfig* repo = RepoOf(repo_url);
    for (size_t i = 0; i < family.size(); ++i) {
      const auto& m = family[i];
      if (m.head.active()) continue;
      NotifyEvent base;
      base.at_ms = now;
      base.repository = repo ? repo->url : repo_url;
      base.project = repo ? repo->project : "";
      ASSIGN_OR_RETURN(auto ref, store_.outbox().BatchRef(m.head.id));
      if (ref.starts_with("refs/heads/")) base.branch = ref.substr(11);
      base.sha = sha;
      base.experiment = m.head.experiment;
      base.url = CommitPageUrl(config_, sha);
      const std::string id = std::to_string(m.head.id);
      const auto& c = comparisons[i];
      const bool corrected = CorrectionOf(m.head) != stats::Correction::kNone;
      if (c && !c->unchanged && c->verdict == stats::Verdict::kWorse && m.base &&
          !m.base->active() && (all_done || !corrected)) {
        NotifyEvent e = base;
        e.kind = "worse";
        e.key = "worse:batch:" + id;
        e.summary = BatchPlace(e) + ": worse than " + ShortSha(m.base->sha) + ": " +
                    ComparisonText(*c);
        e.details = {{"batch_id", m.head.id},
                     {"baseline_sha", m.base->sha},
                     {"comparison", ComparisonJson(*c)}};
        ASSIGN_OR_RETURN(int w, Emit(e));
        written += w;
      }
      ASSIGN_OR_RETURN(auto drift, DriftOf(store_, m.head, &drift_cache));
      if (drift && drift->drift) {
        NotifyEvent e = base;
        e.kind = "drift";
        e.key = "drift:batch:" + id;
        e.summary = BatchPlace(e) + ": " + drift->brief;
        e.details = {{"batch_id", m.head.id},
                     {"text", drift->text},
                     {"p_mean", drift->p_mean},
                     {"p_spread", drift->p_spread},
                     {"earlier_batches", drift->earlier_batches}};
        ASSIGN_OR_RETURN(int w, Emit(e));
        written += w;
      }
      if (m.repro && m.repro->state == ReproCheck::State::kNotReproducible) {
        NotifyEvent e = base;
        e.kind = "not_reproducible";
        e.key = "not_reproducible:batch:" + id;
        e.summary = BatchPlace(e) + ": " + m.repro->text;
        e.details = {{"batch_id", m.head.id},
                     {"seed", m.repro->seed},
                     {"first", m.repro->first},
                     {"second", m.repro->second}};
        ASSIGN_OR_RETURN(int w, Emit(e));
        written += w;
      }
      const std::int64_t dead = m.head.count(RunState::kDead);
      if (dead > 0 && !m.head.reuses_batch_id) {
        std::int64_t total = 0;
        for (auto n : m.head.counts) total += n;
        ASSIGN_OR_RETURN(auto dead_runs, store_.runs().Runs(m.head.id, RunState::kDead, 1));
        NotifyEvent e = base;
        e.kind = "dead_runs";
        e.key = "dead_runs:batch:" + id;
        e.summary = BatchPlace(e) + ": " + std::to_string(dead) + " of " + std::to_string(total) +
                    " runs ended dead";
        json last = json::object();
        if (!dead_runs.empty()) {
          const auto& r = dead_runs.front();
          e.summary += " (seed " + std::to_string(r.seed) + ": " +
                       std::string(Trim(r.last_error.substr(0, 160))) + ")";
          last = {{"run_id", r.id}, {"seed", r.seed}, {"error", r.last_error}};
        }
        e.details = {{"batch_id", m.head.id}, {"dead", dead}, {"runs", total}, {"first_dead", last}};
        ASSIGN_OR_RETURN(int w, Emit(e));
        written += w;
      }
    }
  }
  TRY(WriteRunCursor(store_.outbox(), kCursorMark, cursor, runs.back(), now));
  return written;
}

Result<int> NotifyScanner::ScanConditions(TimeMs now) {
  int written = 0;
  const std::string machines_url = config_.public_url.empty() ? "" : config_.public_url + "/machines";
  ASSIGN_OR_RETURN(auto held, store_.outbox().Marks(kConditionPrefix));
  std::set<std::string> holding;  // condition marks that hold this pass
  // A condition that starts gets a mark with the time it started; the event
  // is keyed by that time, so it is one message however long it lasts, and
  // a new one when it ends and comes back.
  auto condition = [&](const std::string& name) -> Result<std::string> {
    const std::string mark = kConditionPrefix + name;
    holding.insert(mark);
    for (const auto& [n, v] : held) {
      if (n == mark) return v;
    }
    TRY(store_.outbox().SetMark(mark, std::to_string(now), now));
    return std::to_string(now);
  };

  ASSIGN_OR_RETURN(auto pools, store_.machines().PoolStates());
  for (const auto& p : pools) {
    const std::string who = p.pool == "*" ? "all pools" : "pool " + p.pool;
    if (p.failing && p.pool != "*") {
      ASSIGN_OR_RETURN(auto since, condition("pool_failing:" + p.pool));
      NotifyEvent e;
      e.kind = "pool_failing";
      e.key = "pool_failing:" + p.pool + ":" + since;
      e.at_ms = now;
      e.pool = p.pool;
      e.url = machines_url;
      e.summary = who + " is failing: " + std::to_string(p.failed_boots) +
                  " boots failed in a row" +
                  (p.boot_error.empty() ? "" : "; last: " + p.boot_error.substr(0, 300));
      e.details = {{"failed_boots", p.failed_boots},
                   {"boot_error", p.boot_error},
                   {"next_boot_at", p.next_boot_ms > 0 ? IsoTime(p.next_boot_ms) : ""}};
      ASSIGN_OR_RETURN(int w, Emit(e));
      written += w;
    }
    struct Cap {
      const char* period;
      double spent, cap;
      std::string window;
    };
    for (const Cap& c : {Cap{"day", p.spent_day, p.budget_per_day, UtcDay(now)},
                         Cap{"month", p.spent_month, p.budget_per_month, UtcMonth(now)}}) {
      if (!(c.cap > 0) || c.spent < options_.budget_warn * c.cap) continue;
      NotifyEvent e;
      e.kind = "budget";
      e.key = "budget:" + p.pool + ":" + c.period + ":" + c.window;
      e.at_ms = now;
      e.pool = p.pool == "*" ? "" : p.pool;
      e.url = machines_url;
      const int pct = static_cast<int>(std::floor(100 * c.spent / c.cap));
      e.summary = who + " spent " + Money(c.spent) + " of its " + Money(c.cap) + " per UTC " +
                  c.period + " (" + std::to_string(pct) + "%)" +
                  (c.spent >= c.cap ? ": at the cap, no more boots this " + std::string(c.period)
                                    : "");
      e.details = {{"period", c.period},  {"window", c.window}, {"spent", c.spent},
                   {"cap", c.cap},        {"warn_at", options_.budget_warn},
                   {"all_pools", p.pool == "*"}};
      ASSIGN_OR_RETURN(int w, Emit(e));
      written += w;
    }
  }

  // The queue is stuck: runs wait, nothing is leased or running, and
  // neither has anything started or ended for queue_stuck_after.
  ASSIGN_OR_RETURN(auto counts, store_.runs().CountByState());
  const auto n = [&](RunState s) { return counts[static_cast<int>(s)]; };
  if (n(RunState::kQueued) > 0 && n(RunState::kLeased) == 0 && n(RunState::kRunning) == 0) {
    ASSIGN_OR_RETURN(auto oldest, store_.outbox().OldestQueuedMs());
    ASSIGN_OR_RETURN(auto last_end, store_.outbox().LastFinishedMs());
    const TimeMs quiet_since = std::max(oldest.value_or(now), last_end.value_or(0));
    if (oldest && now - quiet_since >= options_.queue_stuck_after_ms) {
      ASSIGN_OR_RETURN(auto since, condition("queue_stuck"));
      NotifyEvent e;
      e.kind = "queue_stuck";
      e.key = "queue_stuck:" + since;
      e.at_ms = now;
      e.url = config_.public_url.empty() ? "" : config_.public_url + "/";
      e.summary = std::to_string(n(RunState::kQueued)) + " runs queued and none started or " +
                  "ended for " + FormatDuration(now - quiet_since) + " (oldest queued " +
                  FormatDuration(now - *oldest) + " ago)";
      e.details = {{"queued", n(RunState::kQueued)},
                   {"quiet_for_s", (now - quiet_since) / 1000},
                   {"oldest_queued_at", IsoTime(*oldest)}};
      ASSIGN_OR_RETURN(int w, Emit(e));
      written += w;
    }
  }
  for (const auto& [name, value] : held) {
    if (!holding.count(name)) TRY(store_.outbox().ClearMark(name));
  }
  return written;
}

// The sender ------------------------------------------------------------------

NotifySender::NotifySender(Store& store, const ServerConfig& config, HttpClient& http,
                           const Clock& clock, NotifyOptions options)
    : store_(store), config_(config), http_(http), clock_(clock), options_(std::move(options)) {}

Result<int> NotifySender::Step() {
  ASSIGN_OR_RETURN(auto due, store_.outbox().Due(kTargetPrefix, clock_.Now(), 50));
  int tried = 0;
  std::set<std::string> deferred;  // targets at their rate limit this pass
  for (const auto& row : due) {
    TimeMs now = clock_.Now();
    const std::string name = row.target.substr(std::string_view(kTargetPrefix).size());
    const NotifyTarget* t = nullptr;
    for (const auto& c : config_.notify) {
      if (c.name == name) t = &c;
    }
    if (!t) {
      TRY(store_.outbox().MarkFailed(row.id, "no notify target named " + name + " in " +
                                                 (config_.path.empty() ? "the config" : config_.path),
                                     now, /*give_up=*/true, now));
      continue;
    }
    if (deferred.count(name)) {
      TRY(store_.outbox().Defer(row.id, now + 60'000 / t->rate_limit));
      continue;
    }
    ASSIGN_OR_RETURN(auto sent, store_.outbox().DeliveredSince(row.target, now - 60'000));
    if (sent >= t->rate_limit) {
      deferred.insert(name);
      TRY(store_.outbox().Defer(row.id, now + 60'000 / t->rate_limit));
      continue;
    }
    json event = json::parse(row.payload, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded()) {
      TRY(store_.outbox().MarkFailed(row.id, "unreadable payload", now, true, now));
      continue;
    }
    ++tried;
    auto out = Send(*t, event, row.delivery_id, http_, options_.timeout_ms);
    now = clock_.Now();
    if (out.ok) {
      TRY(store_.outbox().MarkDelivered(row.id, now));
      spdlog::info("notify {}: {} delivered ({})", t->name, row.kind, row.delivery_id);
      continue;
    }
    const int attempt = row.attempts + 1;
    const bool give_up = out.permanent || attempt >= options_.max_attempts;
    TimeMs delay = options_.retry_base_ms;
    for (int i = 1; i < attempt && delay < options_.retry_max_ms; ++i) delay *= 2;
    delay = std::min(delay, options_.retry_max_ms);
    if (out.retry_after_ms) delay = std::max(delay, *out.retry_after_ms);
    if (give_up) {
      spdlog::warn("notify {}: giving up on {} after {} attempt(s): {}", t->name, row.kind, attempt,
                   out.error);
    } else {
      spdlog::warn("notify {}: {} not delivered (attempt {}/{}, next in {}): {}", t->name,
                   row.kind, attempt, options_.max_attempts, FormatDuration(delay), out.error);
    }
    TRY(store_.outbox().MarkFailed(row.id, out.error, now + delay, give_up, now));
  }
  return tried;
}

// The thread ------------------------------------------------------------------

Notifier::Notifier(std::string db_path, const ServerConfig& config, HttpClient& http,
                   const Clock& clock, NotifyOptions options)
    : db_path_(std::move(db_path)), config_(config), http_(http), clock_(clock),
      options_(std::move(options)) {}

Notifier::~Notifier() { Stop(); }

Status Notifier::Start() {
  ASSIGN_OR_RETURN(auto store, Store::Open(db_path_));
  thread_ = std::thread([this, s = std::move(store)]() mutable { Loop(std::move(s)); });
  return {};
}

void Notifier::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Notifier::Loop(Store store) {
  NotifyScanner scanner(store, config_, clock_, options_);
  NotifySender sender(store, config_, http_, clock_, options_);
  // The MLflow export (agent/triggers/mlflow.h) shares the thread: both are
  // outbox senders to outside services that must never hold up serve.
  MlflowOptions mo;
  mo.data_dir = options_.data_dir;
  MlflowExporter mlflow(store, config_, http_, clock_, mo);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    if (auto n = scanner.Step(); !n) spdlog::warn("notifications: {}", n.error().message);
    if (auto n = sender.Step(); !n) spdlog::warn("notifications: {}", n.error().message);
    if (auto n = mlflow.Scan(); !n) spdlog::warn("mlflow: {}", n.error().message);
    if (auto n = mlflow.Send(); !n) spdlog::warn("mlflow: {}", n.error().message);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(options_.idle_wait_ms), [&] { return stop_; });
  }
  // A last scan, so what ended just before the stop is in the outbox (and
  // sent by the next start) rather than found only by the next scan.
  if (auto n = scanner.Step(); !n) spdlog::warn("notifications: {}", n.error().message);
  if (auto n = mlflow.Scan(); !n) spdlog::warn("mlflow: {}", n.error().message);
}

}  // namespace trainq
