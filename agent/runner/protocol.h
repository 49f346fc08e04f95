// The worker protocol's messages: one typed struct per body of every call
// (register, lease, heartbeat, metrics, complete, a gang member's beat, log
// and result) and per answer a worker reads, each with its JSON form. Both ends use this file: agent/daemon/worker_api.cc reads
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
#include <string_view>
#include <variant>
#include <vector>

#include "agent/runner/gpu_detect.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/types.h"

namespace trainq {

// ---- the envelope of a run's calls ------------------------------------------------

// Every call about a run (heartbeat, metrics, complete, gang) names the lease
// by its fencing token, and the machine making it (the pool token is shared by
// the pool's machines): the body's worker_id, or the X-Trainq-Worker header
// where the body is not JSON (log, which sends the token in X-Trainq-Token).
struct RunEnvelope {
  std::int64_t token = 0;
  std::optional<std::int64_t> worker_id;
};
// `call` names the call in the error: "metrics: \"token\" (the lease's fencing
// token) is required".
Result<RunEnvelope> ParseRunEnvelope(const nlohmann::json& j, std::string_view call);
// The body of a call that carries nothing else (source: POST /api/v1/runs/{id}/source).
nlohmann::json ToJson(const RunEnvelope& e);

// ---- register: POST /api/v1/workers/register --------------------------------------

struct RegisterRequest {
  std::string name;      // the machine's name ("" for a worker started by hand: hostname)
  std::string hostname;
  int pid = 0;
  int slots = 1;
  std::vector<GpuInfo> gpus;
  int cpus = 0;
  std::int64_t memory_mb = 0;
  std::string version;
  std::string trainer;   // trainq-train's path here, "" when `trainer:` runs cannot start
  std::string sandbox;   // the form the worker's probe found (ProbeSandbox), and why
  std::string sandbox_note;
  std::optional<int> runs_per_gpu;
};
nlohmann::json ToJson(const RegisterRequest& r);
// Refuses a body that names neither machine nor host, and a field of the
// wrong type, with the line the server answers ("register: ...").
Result<RegisterRequest> ParseRegisterRequest(const nlohmann::json& j);
// What the store keeps of a registration beside its name and slots (GPUs,
// CPUs, memory, version, trainer, sandbox): the machine's resources column.
nlohmann::json ResourcesJson(const RegisterRequest& r);

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
  std::optional<std::int64_t> worker_id;  // named by a result kept in the outbox
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

// ---- gang: POST /api/v1/runs/{id}/gang ------------------------------------------

// A gang member names its run's lease, its node and its machine in each call.
struct GangMemberId {
  std::int64_t token = 0;
  int node_rank = 0;
  std::int64_t worker_id = 0;
};

// "beat": the member is alive; node 0 also says where the rendezvous is.
struct GangBeat {
  GangMemberId member;
  bool started = false;        // its processes are running (node 0: the run is running)
  std::string master_addr;     // node 0, once it has chosen the port
  int master_port = 0;
};
struct GangBeatAnswer {
  std::string master_addr;     // the rendezvous, once node 0 has said it
  int master_port = 0;
  TimeMs expires_ms = 0;
};

// "log": one rank's output, sent before the member reports.
struct GangLog {
  GangMemberId member;
  int rank = 0;                // 0..kMaxRank
  std::string text;
  static constexpr int kMaxRank = 99'999;
};

// "complete": the member's result (node 0's success carries the metric).
struct GangComplete {
  GangMemberId member;
  std::string outcome;         // succeeded | failed | interrupted
  std::optional<double> metric_value;
  std::optional<int> exit_code;
  std::string error;           // cut to kMaxError bytes when written
  bool retry = true;
  static constexpr size_t kMaxError = 2000;
};

using GangRequest = std::variant<GangBeat, GangLog, GangComplete>;
nlohmann::json ToJson(const GangBeat& r);
nlohmann::json ToJson(const GangLog& r);
nlohmann::json ToJson(const GangComplete& r);
// The body's action picks the message; a missing field or one of the wrong
// type is refused with the line the server answers ("gang: ...").
Result<GangRequest> ParseGangRequest(const nlohmann::json& j);
nlohmann::json ToJson(const GangBeatAnswer& a);
GangBeatAnswer ParseGangBeatAnswer(const nlohmann::json& j);

// ---- register: the answer --------------------------------------------------------

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
