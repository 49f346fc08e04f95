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

// Tells OpenBLAS, when it is the loaded BLAS, to use `threads` threads.
// libtorch's set_num_threads does not reach a BLAS that Debian's libtorch only
// knows as libblas.so.3, and OpenBLAS's own threads (one per core by default)
// then compete with the training thread and with other runs. Returns whether
// OpenBLAS was found.
bool SetBlasThreads(int threads);

// Keeps freed memory in the process instead of returning it to the kernel:
// each step frees and reallocates the same gradient buffers, and glibc's
// default would unmap and page-fault them in again every time.
void KeepFreedMemory();

}  // namespace trainq::trainer
