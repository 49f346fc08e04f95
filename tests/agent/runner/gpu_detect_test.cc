// DetectGpus against a stand-in nvidia-smi on PATH (a real process through
// the real process runner): what it asks for, what it reads, and a failing
// nvidia-smi offering no GPUs.
#include "agent/runner/gpu_detect.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

// PATH with `dir` first, for one test.
class PathFirst {
 public:
  explicit PathFirst(const std::string& dir)
      : old_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    ::setenv("PATH", (dir + ":" + old_).c_str(), 1);
  }
  ~PathFirst() { ::setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
}

TEST_CASE("DetectGpus runs nvidia-smi through the process runner and reads its csv", "[worker]") {
  testing::TempDir tmp;
  const std::string args = tmp / "args";
  WriteScript(tmp / "nvidia-smi", "echo \"$@\" > " + args +
                                      "\nprintf '0, NVIDIA H100 80GB HBM3, 81559\\n"
                                      "1, NVIDIA H100 80GB HBM3, [N/A]\\n'\n");
  PathFirst path(tmp.path().string());
  auto gpus = DetectGpus();
  REQUIRE(gpus.size() == 2);
  CHECK(gpus[0].index == 0);
  CHECK(gpus[0].name == "NVIDIA H100 80GB HBM3");
  CHECK(gpus[0].memory_mb == 81559);
  CHECK(gpus[1].index == 1);
  CHECK(gpus[1].memory_mb == 0);
  CHECK(ReadFile(args).value() ==
        "--query-gpu=index,name,memory.total --format=csv,noheader,nounits\n");
}

TEST_CASE("DetectGpus offers no GPUs when nvidia-smi fails or prints something else", "[worker]") {
  testing::TempDir tmp;
  PathFirst path(tmp.path().string());
  WriteScript(tmp / "nvidia-smi",
              "echo 'NVIDIA-SMI has failed because it could not communicate with the driver'\n"
              "exit 9\n");
  CHECK(DetectGpus().empty());
  WriteScript(tmp / "nvidia-smi", "echo 'No devices were found'\n");
  CHECK(DetectGpus().empty());
}

}  // namespace
}  // namespace trainq
