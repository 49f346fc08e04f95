// MLflow export (issue 43): each finished batch written to an MLflow tracking
// server through its REST API (/api/2.0/mlflow/...), from the store's outbox
// (queue/outbox.h, targets "mlflow:..."), so a down or slow tracking server
// never holds up serve and a restart catches up.
//
//   MlflowExporter::Scan   finds batches whose last run ended since its
//                          cursor (a mark) and writes one outbox row per batch
//                          (target "mlflow:export", key "batch:<id>").
//   MlflowExporter::Send   exports the due rows: the experiment
//                          <prefix><experiment> (get-by-name, else create), a
//                          parent run per batch (verdict, effect, interval, p,
//                          baseline; the dashboard link in mlflow.note.content)
//                          and a child run per seed (mlflow.parentRunId, params,
//                          final metric, curve, status, mlflow.source.git.*).
//                          Every run carries a `trainq.uid` tag and is looked
//                          up with runs/search before runs/create, so a retry
//                          or a restart never makes a second one; a run is
//                          written whole before its `trainq.exported` tag, and
//                          metric points are logged with fixed timestamps, so
//                          writing a half-written run again adds nothing.
//   Backoff, giving up and the last error live in the outbox row.
// docs/mlflow.md shows what a run looks like in MLflow.
#pragma once

#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

struct MlflowOptions {
  TimeMs retry_base_ms = 5'000;  // 5 s, 10 s, 20 s, ... at most retry_max_ms
  TimeMs retry_max_ms = 15 * 60'000;
  int max_attempts = 40;         // about 8 hours of tries, then given up
  TimeMs timeout_ms = 15'000;    // one REST call
  // serve's data dir: the store names a watched repository by its mirror's
  // path there, which maps it to its `repositories:` entry (and its own
  // `mlflow:`). "": only urls that are the entry's own url match.
  std::string data_dir;
};

// The outbox target of the export.
inline constexpr std::string_view kMlflowTarget = "mlflow:export";

class MlflowExporter {
 public:
  MlflowExporter(Store& store, const ServerConfig& config, HttpClient& http, const Clock& clock,
                 MlflowOptions options = {});
  // Finished batches since the cursor into the outbox (the first scan starts
  // now: `trainq mlflow export --since` back-fills); rows written.
  Result<int> Scan();
  // Every finished batch created at or after `since_ms` into the outbox (the
  // back-fill); rows written (a batch already there is not written again).
  Result<int> EnqueueSince(TimeMs since_ms);
  // Exports the due rows; how many were tried.
  Result<int> Send(int limit = 20);
  // Exports one batch now (what Send does for a row).
  Status ExportBatch(std::int64_t batch_id);

 private:
  Result<int> Enqueue(const BatchProgress& b);
  Result<nlohmann::json> Call(const std::string& method, const std::string& endpoint,
                              const nlohmann::json& body);
  Result<std::string> ExperimentId(const std::string& name);
  // The run tagged trainq.uid = uid in the experiment, or a new one: its id
  // and whether it was written whole already.
  Result<std::pair<std::string, bool>> FindOrCreateRun(const std::string& experiment_id,
                                                       const std::string& uid,
                                                       const std::string& run_name,
                                                       TimeMs start_ms,
                                                       const nlohmann::json& tags);
  // runs/log-batch in calls within MLflow's limits, then runs/update and the
  // trainq.exported tag.
  // A child run per seed of `b` under `parent_id`, named name_prefix + "seed N".
  Status ExportChildren(const std::string& exp_id, const std::string& parent_id,
                        const BatchProgress& b, const std::vector<RunRow>& runs,
                        const nlohmann::json& git_tags, const std::string& name_prefix,
                        const nlohmann::json& extra_params);
  // A sweep point's batch: its seeds as children of the sweep's one parent.
  Status ExportSweepPoint(const BatchProgress& b, const nlohmann::json& sweep);
  Status WriteRun(const std::string& run_id, const nlohmann::json& params,
                  const nlohmann::json& tags, const nlohmann::json& metrics,
                  const std::string& status, TimeMs end_ms);

  Store& store_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  MlflowOptions options_;
  // The `mlflow:` that applies to a batch of `repo_url` (its repository's,
  // else the global one).
  const MlflowConfig& TargetFor(const std::string& repo_url) const;

  std::map<std::string, std::string> experiment_ids_;  // tracking_uri + '\n' + name -> id
  const MlflowConfig* target_ = nullptr;  // the server of the batch being exported
  std::optional<TimeMs> retry_after_ms_;  // the last 429/503's Retry-After, this row
};

// An MLflow metric or param key from ours: letters, digits and _ - . / and
// space kept, others as '_', at most 250 characters.
std::string MlflowKey(std::string_view name);

// The export's state for the dashboard's MLflow card (GET /dash/api/mlflow):
// where batches go ("servers": global and per repository), how many were
// exported, are pending or were given up, the last export (time and batch)
// and the last error.
Result<nlohmann::json> MlflowStatusJson(Store& store, const ServerConfig& config);

}  // namespace trainq
