// `trainq db copy`, `trainq db check` (agent/cli/cmd_db.cc; queue/store_copy.h).
#pragma once

#include "agent/cli/cli.h"

namespace trainq {

void AddDbCommands(CLI::App& app, const CliContext& ctx);

}  // namespace trainq
