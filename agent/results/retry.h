// Putting dead or cancelled runs back in the queue, for `trainq retry` on
// the database and for serve's POST /api/v1/retry (`trainq retry --server`):
// one path, so both retry the same runs and say the same thing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "core/clock.h"
#include "core/result.h"
#include "queue/store.h"

namespace trainq {

// Retries run `id`, or with `batch` every dead run of batch `id` (none is
// no error), recording `who`. Returns {"retried": [{run, was, attempts,
// max_attempts, retries, error}]}. The store's refusals pass through:
// kNotFound for an unknown run or batch, kConflict for a run that
// succeeded or is still in the queue (a batch stops at the first refusal,
// keeping the runs it already retried).
Result<nlohmann::json> RetryRuns(Store& store, std::int64_t id, bool batch, TimeMs now,
                                 const std::string& who);

// What `trainq retry` prints for RetryRuns' answer: one line per run, or
// "batch N has no dead runs; nothing to retry".
void PrintRetried(const nlohmann::json& retried, std::int64_t id, bool batch, std::ostream& out);

}  // namespace trainq
