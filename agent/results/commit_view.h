// One commit as a JSON document: its batches (progress, spread, every run,
// the comparison with each batch's baseline and its verdict), their forge
// statuses and the pushes that brought it. `trainq show --json` prints it and
// the dashboard's commit page (agent/daemon/dashboard.h) serves it, so both
// show the same numbers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"
#include "queue/store.h"

namespace trainq {

// Everything trainq knows about the commit(s) whose sha starts with `prefix`.
// kNotFound when nothing matches; kInvalidArgument when the prefix is not hex
// or names several commits.
Result<nlohmann::json> LoadCommitView(Store& store, const std::string& prefix);

}  // namespace trainq
