// Coalescing superseded pushes: once a push to a ref has queued its batches,
// the runs still waiting in the heads that earlier pushes to the same ref
// left behind are cancelled. Ten quick pushes to a pull request then cost the
// runs of the last one, not ten times the repeats.
//
// What is kept:
//   - runs that started (leased or running): they finish and keep their result;
//   - the new push's base and what its batches compare with or reuse (an
//     ordinary push is compared with the head it replaced);
//   - a head that a push to another ref, or a newer push, also names;
//   - every head of the default branch with `coalesce: branches` (the
//     default): its history is the record the others are compared with
//     (when neither the config nor the push names the default branch, only
//     pull requests' heads are coalesced).
// Per repository: `coalesce: branches | all | off` (server_config.h).
#pragma once

#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/pushes.h"
#include "queue/store.h"

namespace trainq {

struct CoalesceOutcome {
  int batches = 0;  // batches that had runs cancelled
  int runs = 0;     // runs cancelled
};

// Called once `push` is done (its batches queued). `batches_repo` is where
// the repository's batches are recorded (its mirror's location). Looks at the
// newest `history` pushes of the store.
Result<CoalesceOutcome> CoalesceSuperseded(Store& store, const RepoConfig& repo,
                                           const Pushes::Push& push,
                                           const std::string& batches_repo, TimeMs now,
                                           int history = 500);

}  // namespace trainq
