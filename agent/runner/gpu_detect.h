// What a worker machine offers: GPUs (from nvidia-smi), CPUs and memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq {

struct GpuInfo {
  int index = 0;
  std::string name;            // "" when given by hand (--gpus 0,1)
  std::int64_t memory_mb = 0;  // 0 when unknown
};

// Parses the output of
//   nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits
// ("0, NVIDIA H100 80GB HBM3, 81559" per line). A malformed line is an error
// naming its line number.
Result<std::vector<GpuInfo>> ParseNvidiaSmi(std::string_view text);

// The GPUs of --gpus: "auto" (nvidia-smi when on PATH, else none), "none" or
// "" (none), or a list of indices "0,1".
Result<std::vector<GpuInfo>> ResolveGpus(const std::string& spec);

// Runs nvidia-smi (found on PATH); no GPUs when it is absent or fails.
std::vector<GpuInfo> DetectGpus();

// MemTotal of /proc/meminfo in MiB; 0 when unreadable.
std::int64_t DetectMemoryMb();
// Parses the text of /proc/meminfo; 0 without a MemTotal line.
std::int64_t ParseMemTotalMb(std::string_view meminfo);

}  // namespace trainq
