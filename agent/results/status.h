// The status document and its parts, as JSON: what `trainq status --json`,
// `trainq machines --json`, `trainq report --json` and GET /api/v1/status print.
// Built here once; agent/cli renders them as text, agent/daemon serves them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace trainq {

class Store;
struct MachineRow;
struct BatchProgress;
struct RunRow;

// The status document: counts, slots, machines, running runs, batches, pushes.
// max_active > 0: only the newest max_active active batches are read (the
// terminal view shows 20; with a million runs queued in 10,000 batches the
// rest would cost seconds), and "batches_total" says how many the full list
// has. 0: all of them (--json, GET /api/v1/status).
Result<nlohmann::json> StatusJson(Store& store, const std::string& db, TimeMs now,
                                  int max_active = 0);
// One machine: state, times, runs done, billed time and cost so far.
nlohmann::json MachineJson(const MachineRow& m, TimeMs now);
// A run as `trainq runs --json` prints it.
nlohmann::json RunJson(const RunRow& r);
// "7/10 done, 1 failed, 2 running".
std::string ProgressText(const BatchProgress& b);
// A batch with its progress and its metric's summary.
nlohmann::json BatchJson(const BatchProgress& b);

// How long until a batch's last run ends, from how long its experiment's runs
// took (`durations`, the last succeeded ones of this batch or earlier batches
// of the experiment; their median counts), the elapsed time of its runs now
// running, its runs waiting to start, and the slots it can use at once: the
// waiting runs go to the earliest free slot in turn. nullopt when nothing was
// measured yet or no slot can take a run (machines still booting).
std::optional<TimeMs> EstimateRemaining(std::vector<TimeMs> durations,
                                        const std::vector<TimeMs>& running_elapsed,
                                        std::int64_t waiting, int slots);

// "$1.25".
std::string Money(double v);
// A machine's billed time: from its creation to its stop, or to `now`.
TimeMs Billed(const MachineRow& m, TimeMs now);
// How long a ready machine has been idle ("3m"), "busy", or "-" when not ready.
std::string Idle(const MachineRow& m, TimeMs now);

}  // namespace trainq
