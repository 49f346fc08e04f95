// Facts about the process that affect training speed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trainq::trainer {

// Given the text of /proc/self/maps, a one-line warning when the reference
// BLAS (Debian's /usr/lib/<arch>/blas/libblas.so.3) is the BLAS loaded, which
// makes libtorch's matrix products several times slower than OpenBLAS.
std::optional<std::string> ReferenceBlasWarning(std::string_view proc_maps);

// Reads /proc/self/maps (empty when unreadable).
std::string ReadProcMaps();

}  // namespace trainq::trainer
