// Commit statuses back to the forge: `pending` when a batch is queued, then
// `success` or `failure` with a one-line summary when its runs have ended.
//
// The wanted status of each batch lives in the store (statuses), so a
// restart loses none. Posting goes through HttpClient; a forge that is down is
// retried with backoff and then given up with a log line. Nothing else waits
// for it: the reporter runs on its own thread with its own Store.
#pragma once

#include <optional>
#include <string>

#include "agent/results/analysis.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

// "accuracy 0.664 ± 0.015 (n=10)", plus ", 1 failed" / ", 2 cancelled" when so.
std::string BatchStatusDescription(const BatchProgress& b);
// success: every run succeeded; failure: a run failed for good or none
// succeeded; error: everything was cancelled.
CommitState BatchFinalState(const BatchProgress& b);

struct WantedStatus {
  CommitState state = CommitState::kPending;
  std::string description;
};
// The status of a batch whose runs ended, with the verdict against its
// baseline when there is one, within 140 characters:
//   "accuracy 0.706 ± 0.005 (n=6); +0.012 [+0.009, +0.015] vs 1a2b3c4: better"
// pending while the baseline still runs; `failure` when runs failed, and as
// `fail_on` says ("worse", "not_better", "never") for the verdict.
//
// The experiments of one commit are one family (agent/results/analysis.h):
// with a correction, the status waits until every one of them ended, then
// uses `family.comparison` (corrected over them) and says so:
//   "...; +0.012 [+0.004, +0.020] vs 1a2b3c4: better (Holm over 20: p=0.001, adj 0.020)"
struct StatusFamily {
  int size = 1;         // experiments at the commit
  int unfinished = 0;   // others of them (or their baselines) still running
  std::optional<BatchComparison> comparison;  // this batch's, corrected over the family
  std::string drift;  // DriftCheck::brief when the batch drifted, else ""
  std::string repro;  // "not reproducible (seed 3)" when its determinism check failed
};
WantedStatus FinalStatus(const BatchProgress& b, const std::optional<BatchProgress>& baseline,
                         const std::string& fail_on, const StatusFamily& family = {});

// The dashboard's page of commit `sha` under config.public_url
// ("https://trainq.example/commit/SHA"): the statuses' target_url; "" when
// no public_url is set.
std::string CommitPageUrl(const ServerConfig& config, const std::string& sha);

struct StatusReporterOptions {
  TimeMs retry_base_ms = 5'000;  // 5 s, 10 s, 20 s, ...
  int max_attempts = 5;          // then given up
};

// "waiting: <note>", at most 140 characters.
std::string WaitingStatusDescription(const std::string& note);

class StatusReporter {
 public:
  StatusReporter(Store& store, const ServerConfig& config, HttpClient& http, const Clock& clock,
                 StatusReporterOptions options = {});
  // Turns finished batches' pending statuses into final ones, then posts what
  // is due. Returns how many posts were tried.
  Result<int> Step();

 private:
  // A pending status follows why its batch waits ("waiting: pool gpu at its
  // per_day budget $50.00 reached ($50.12 spent)", from the notes serve's
  // fleet keeps), and says "queued" again once it no longer does.
  Status UpdateWaiting();
  Store& store_;
  const ServerConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  StatusReporterOptions options_;
};

}  // namespace trainq
