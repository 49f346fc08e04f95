// The trainq-train command line. Defaults come from the run environment that
// the trainq worker sets (TRAINQ_SEED, TRAINQ_METRICS_FILE, TRAINQ_OUTPUT_DIR),
// so `trainer: configs/x.yaml` in trainq.yaml needs no flags.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "trainer/exit_codes.h"  // the exit codes main returns

namespace trainq::trainer {

struct Options {
  std::string spec;
  std::uint64_t seed = 1;
  std::int64_t repeats = 1;        // fused replicas: seeds seed..seed+repeats-1
  std::string device = "auto";     // auto | cpu | cuda
  std::string metrics_file;        // may contain {seed} and {repeat}
  std::string output_dir;          // may contain {seed} and {repeat}
  std::vector<std::string> sets;   // key.path=value overrides
  int threads = 1;                 // intra-op threads (trainq runs several seeds side by side)
  std::string fuse = "auto";       // auto: fuse repeats; off: run them one after another
  bool print_spec = false;         // print the merged spec and exit
  bool quiet = false;              // no progress output
};

// Parses argv. Returns nullopt when --help was printed (exit 0). Bad usage is
// an kInvalidArgument error (exit 2). `getenv` is injected for tests.
Result<std::optional<Options>> ParseCommandLine(int argc, const char* const* argv,
                                                const std::function<const char*(const char*)>& getenv);

}  // namespace trainq::trainer
