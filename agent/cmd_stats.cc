// `trainq stats`: placeholder until the statistics commands land.
#include <CLI/CLI.hpp>

#include "agent/commands.h"

namespace trainq {

void AddStatsCommands(CLI::App& app, int* exit_code) {
  (void)app;
  (void)exit_code;
}

}  // namespace trainq
