// Runs a short command (sbatch, squeue, a site's boot script) through the
// ProcessRunner seam and captures its stdout and stderr separately, with a
// wall-clock timeout after which its process group is killed.
#pragma once

#include <cstdint>
#include <string>

#include "core/process.h"
#include "core/result.h"

namespace trainq::cloud {

struct CapturedOutput {
  ExitStatus status;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `spec.output_path` is ignored (the output is captured). Fails with kTimeout
// when the command runs past `timeout_ms` (it is killed), kIo when it cannot
// start; a non-zero exit is not an error here: look at `status`.
// `scratch_dir` holds the two capture files while it runs ("" = /tmp).
Result<CapturedOutput> RunCapture(ProcessRunner& runner, ProcessSpec spec, std::int64_t timeout_ms,
                                  const std::string& scratch_dir = "");

// The last `max` characters of `s`, trimmed, for error messages.
std::string Tail(const std::string& s, size_t max = 500);

}  // namespace trainq::cloud
