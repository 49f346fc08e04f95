// Logging setup. Code logs through spdlog's default logger (to stderr).
// Never log secrets: tokens, webhook secrets and signatures stay out of logs.
#pragma once

namespace trainq {

// verbosity: 0 = info, 1 = debug, 2+ = trace; quiet lowers it to warnings.
void InitLogging(int verbosity, bool quiet = false);

}  // namespace trainq
