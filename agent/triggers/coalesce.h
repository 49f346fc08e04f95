// Coalescing superseded pushes: once a push to a ref has queued its batches,
// the runs still waiting in the heads that earlier pushes to the same ref
// left behind are cancelled. Ten quick pushes to a pull request then cost the
// runs of the last one, not ten times the repeats.
//
// Only batches that this ref's own pushes queued are candidates: each batch
// records the ref whose push created it (batches.ref, schema 18), and a batch
// another ref queued, or none did (`trainq submit`, a baseline queued at a
// base, a batch from before schema 18), is never cancelled here. Among them,
// a batch is cancelled when its commit was the head of an earlier push to
// this ref (with `per_commit`, the commits between two heads are not
// superseded). Nothing depends on a window of recent pushes: the candidates
// are read from the batches with waiting runs, and the pushes that name a
// commit through their index.
//
// What is kept:
//   - runs that started (leased or running): they finish and keep their result;
//   - the new push's base and what its batches compare with or reuse (an
//     ordinary push is compared with the head it replaced);
//   - a batch that a batch of another ref (or of none) reuses or compares with;
//   - a head that a push to another ref, or a newer push, also names;
//   - every batch of the default branch with `coalesce: branches` (the
//     default): its history is the record the others are compared with; a
//     push to another ref never cancels what the default branch queued,
//     whatever the mode (when neither the config nor the push names the
//     default branch, only pull requests' heads are coalesced).
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
// the repository's batches are recorded (its mirror's location).
Result<CoalesceOutcome> CoalesceSuperseded(Store& store, const RepoConfig& repo,
                                           const Pushes::Push& push,
                                           const std::string& batches_repo, TimeMs now);

}  // namespace trainq
