// What goes to the server while and after a run: heartbeats (the first says
// started), new metric points and log bytes (Ship), and the result
// (Complete; kept in the outbox when the server does not answer).
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/runner/gang.h"
#include "agent/runner/run_process.h"
#include "agent/runner/worker.h"
#include "agent/runner/worker_util.h"
#include "core/http_client.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

using worker_util::Get;
using worker_util::ReadFrom;

bool Worker::Ship(RunSlot& r, const Proc& p, bool final) {
  const auto& run = r.run.lease;
  const std::string path = "/api/v1/runs/" + std::to_string(run.run_id);
  // Metric points the server has not seen; a half-written last line waits.
  std::string text = ReadRunFile(r.paths.metrics);
  if (!final) {
    size_t nl = text.rfind('\n');
    text = nl == std::string::npos ? "" : text.substr(0, nl + 1);
  }
  auto reading = ReadRunMetric(text, "", run.metric_name, "");
  if (reading.points.size() > r.points_sent) {
    MetricsRequest m;
    m.token = run.token;
    for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
      const auto& pt = reading.points[i];
      if (!std::isfinite(pt.value)) continue;  // JSON and SQLite have no NaN
      m.points.push_back(pt);
    }
    auto a = m.points.empty() ? Result<WireAnswer>(WireAnswer{200, {}, {}})
                              : link_.Call(path + "/metrics", ToJson(m));
    if (a && a->status == 409) {
      // The lease is gone; a cancelled attempt's output is still kept.
      if (final) (void)ShipLog(r, p, true);
      return false;
    }
    if (a && a->status == 200) r.points_sent = reading.points.size();
  }
  return ShipLog(r, p, final);
}

bool Worker::ShipLog(RunSlot& r, const Proc& p, bool final) {
  const auto& run = r.run.lease;
  const std::string path = "/api/v1/runs/" + std::to_string(run.run_id);
  // Log bytes from where the server is; one chunk per heartbeat, all at the end.
  for (int chunk = 0; chunk < (final ? 1000 : 1); ++chunk) {
    std::string data = ReadFrom(p.log_path, p.log_start + r.log_sent, config_.max_log_chunk);
    if (data.empty()) break;
    WireCall req;
    req.path = path + "/log";
    req.content_type = "application/octet-stream";
    req.headers = {{"X-Trainq-Token", std::to_string(run.token)},
                   {"X-Trainq-Offset", std::to_string(r.log_sent)}};
    req.body = std::move(data);
    auto a = link_.Send(req);
    if (!a) break;
    if (a->status == 409) return false;
    if (a->status != 200) {
      spdlog::warn("run {}: log refused: HTTP {} {}", run.run_id, a->status, AnswerError(a->body));
      break;
    }
    std::int64_t size = Get<std::int64_t>(a->body, "size", r.log_sent + std::ssize(req.body));
    if (size <= r.log_sent) break;  // no progress: try again later
    r.log_sent = size;
  }
  return true;
}

bool Worker::Heartbeat(RunSlot& r, const Proc* p) {
  const auto& run = r.run.lease;
  TimeMs now = clock_.Now();
  r.last_heartbeat_ms = now;
  HeartbeatRequest req;
  req.token = run.token;
  bool say_started = r.started && !r.started_sent;
  req.started = say_started;
  auto a = link_.Call("/api/v1/runs/" + std::to_string(run.run_id) + "/heartbeat", ToJson(req));
  if (!a) return true;  // tried again at the next beat
  if (a->status == 409) {
    spdlog::info("run {}: lease lost ({}); stopping it", run.run_id, AnswerError(a->body));
    return false;
  }
  if (a->status != 200) {
    spdlog::warn("run {}: heartbeat refused: HTTP {} {}", run.run_id, a->status, AnswerError(a->body));
    return true;
  }
  if (say_started) r.started_sent = true;
  if (p && r.started) {
    if (!Ship(r, *p, false)) {
      spdlog::info("run {}: lease lost; stopping it", run.run_id);
      return false;
    }
  }
  return true;
}

void Worker::Complete(std::int64_t run_id, const std::string& outcome, std::optional<double> metric,
                      std::optional<int> exit_code, const std::string& error, bool config_error,
                      const Proc* proc) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  const auto& run = it->second.run.lease;
  CompleteRequest message;
  message.token = run.token;
  message.outcome = outcome;
  // A kept copy still names the machine the run was leased to after a restart.
  message.worker_id = registration_.machine();
  message.metric_value = metric;
  message.exit_code = exit_code;
  message.error = error;
  message.retry = !config_error;  // a configuration error fails the same way every time
  const json req = ToJson(message);
  std::string path = "/api/v1/runs/" + std::to_string(run_id) + "/complete";
  // A server that is briefly away must not lose a result of hours: a few tries.
  Result<WireAnswer> a = Fail(ErrorKind::kUnavailable, "not sent");
  // While stopping (a preemption notice gives seconds), one try only.
  const int tries = stopping_ ? 1 : 3;
  for (int attempt = 0; attempt < tries && !a; ++attempt) {
    if (attempt > 0) clock_.SleepFor(std::min<TimeMs>(1000 * attempt, 2000));
    a = link_.Call(path, req);
  }
  if (!a && outcome != "interrupted") {
    // Kept on disk, with what the server has not seen, and delivered when it
    // is back (DeliverKept): the run's result is not lost with the connection.
    const RunSlot& r = it->second;
    PendingResult kept;
    kept.run_id = run_id;
    kept.complete = req;
    auto reading = ReadRunMetric(ReadRunFile(r.paths.metrics), "", run.metric_name, "");
    for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
      const auto& pt = reading.points[i];
      if (!std::isfinite(pt.value)) continue;
      kept.points.push_back(PointJson(pt));
    }
    if (proc) {
      kept.log_offset = r.log_sent;
      kept.log = ResultOutbox::LogTail(proc->log_path, proc->log_start + r.log_sent);
    }
    kept_.Keep(kept, "run " + std::to_string(run_id), a.error().message,
               registration_.heartbeat_ms());
  } else if (!a) {
    spdlog::error("run {}: result not delivered ({}); its lease will expire", run_id,
                  a.error().message);
  } else if (a->status == 409) {
    spdlog::info("run {}: result refused, the lease is stale ({})", run_id, AnswerError(a->body));
  } else if (a->status != 200) {
    spdlog::warn("run {}: result refused: HTTP {} {}", run_id, a->status, AnswerError(a->body));
  } else if (outcome == "succeeded") {
    spdlog::info("run {} succeeded: {} seed {}, {} = {}", run_id, run.experiment, run.seed,
                 run.metric_name, FormatDouble(metric.value_or(0), 4));
  } else if (outcome == "interrupted") {
    spdlog::info("run {} interrupted: {} seed {} goes back to the queue", run_id, run.experiment,
                 run.seed);
  } else {
    spdlog::warn("run {} failed: {} seed {}: {}", run_id, run.experiment, run.seed, error);
  }
  runs_.erase(it);
}

}  // namespace trainq
