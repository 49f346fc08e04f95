// The worker protocol's messages: one typed struct per body of the lease,
// heartbeat, metrics and complete calls (and the register answer), each with
// its JSON form. Both ends use this file: agent/daemon/worker_api.cc reads
// requests and writes answers with it, agent/runner's Worker writes requests
// and reads answers (through a LeaseClient, agent/runner/lease_client.h).
// The routes, their auth and status codes are in agent/daemon/worker_api.h.
//
// A reader of a request names the call and the field it refuses ("complete: a
// succeeded run needs a numeric \"metric_value\""): the server answers 400
// with that line (a field of the wrong type throws nlohmann::json's
// type_error, which the server's worker routes answer with 400 too). A reader of an answer is lenient: a field missing or of the
// wrong type takes its default (an older server may not send it).
//
// Part of agent/runner, which agent/daemon links whole (its in-process
// Worker), so the two ends build from one file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/types.h"

namespace trainq {

// ---- lease: POST /api/v1/workers/{id}/lease ----------------------------------

struct LeaseRequest {
  int max_runs = 1;
  double free_gpus = 0;
  std::optional<int> runs_per_gpu;  // unset: the pool's
  int fuse_max = 1;
  TimeMs wait_ms = 0;  // long poll; the server caps it
};
nlohmann::json ToJson(const LeaseRequest& r);
// A field of the wrong type throws nlohmann::json::type_error (the server
// answers 400 "bad request body: ...").
LeaseRequest ParseLeaseRequest(const nlohmann::json& j);

// The run of a lease answer: the store's LeasedRun plus the fusion fields.
struct WorkerRun {
  LeasedRun lease;
  std::string trainer;     // the experiment's trainer spec path, "" for a plain command
  std::int64_t group = 0;  // > 0: leased fused with the other runs of this group
};
nlohmann::json ToJson(const LeasedRun& r);
Result<WorkerRun> ParseWorkerRun(const nlohmann::json& j);

struct LeaseAnswer {
  std::string state = "ready";  // ready | draining (lease nothing more, finish, exit)
  std::vector<LeasedRun> runs;
};
nlohmann::json ToJson(const LeaseAnswer& a);
// The runs it can read; `bad` gets one line for each run it cannot.
LeaseAnswer ParseLeaseAnswer(const nlohmann::json& j, std::vector<WorkerRun>& runs,
                             std::vector<std::string>& bad);

// ---- heartbeat: POST /api/v1/runs/{id}/heartbeat -------------------------------

struct HeartbeatRequest {
  std::int64_t token = 0;
  bool started = false;  // the first beat after the process started: the run is running
};
nlohmann::json ToJson(const HeartbeatRequest& r);
HeartbeatRequest ParseHeartbeatRequest(const nlohmann::json& j);  // throws as above

struct HeartbeatAnswer {
  TimeMs expires_ms = 0;
};
nlohmann::json ToJson(const HeartbeatAnswer& a);

// ---- metrics: POST /api/v1/runs/{id}/metrics -----------------------------------

// One point as the wire has it (JSON has no NaN: non-finite points are left out).
nlohmann::json PointJson(const MetricPoint& p);
struct MetricsRequest {
  std::int64_t token = 0;
  std::vector<MetricPoint> points;
};
nlohmann::json ToJson(const MetricsRequest& r);
Result<MetricsRequest> ParseMetricsRequest(const nlohmann::json& j);

// ---- complete: POST /api/v1/runs/{id}/complete ---------------------------------

struct CompleteRequest {
  std::int64_t token = 0;
  std::string outcome;  // succeeded | failed | interrupted
  std::optional<std::int64_t> worker_id;  // the machine the run was leased to
  std::optional<double> metric_value;     // required for succeeded
  std::optional<int> exit_code;
  std::string error;
  bool retry = true;  // false: a configuration error (agent/runner/run_process.h), dead now
};
nlohmann::json ToJson(const CompleteRequest& r);
// Refuses a success without a numeric metric and an unknown outcome, with the
// line the server answers.
Result<CompleteRequest> ParseCompleteRequest(const nlohmann::json& j);

struct CompleteAnswer {
  std::string state;  // the run's state now: succeeded, failed (will retry), dead, queued
};
nlohmann::json ToJson(const CompleteAnswer& a);

// ---- register: POST /api/v1/workers/register (the answer) ----------------------

struct RegisterAnswer {
  std::int64_t worker_id = 0;
  std::string name;
  std::string pool;
  TimeMs lease_ms = 0;
  TimeMs heartbeat_ms = 10'000;
  std::optional<TimeMs> orphan_timeout_ms;
  std::optional<int> runs_per_gpu;
  std::optional<std::string> self_stop;
};
nlohmann::json ToJson(const RegisterAnswer& a);
RegisterAnswer ParseRegisterAnswer(const nlohmann::json& j);

// The "error" of an answer's body, "" when there is none.
std::string AnswerError(const nlohmann::json& body);

}  // namespace trainq
