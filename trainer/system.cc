#include "trainer/system.h"

#include <dlfcn.h>
#include <malloc.h>

#include <fstream>
#include <sstream>

namespace trainq::trainer {

std::optional<std::string> ReferenceBlasWarning(std::string_view maps) {
  const bool reference = maps.find("/blas/libblas.so") != std::string_view::npos;
  const bool optimised = maps.find("openblas") != std::string_view::npos ||
                         maps.find("libblis") != std::string_view::npos ||
                         maps.find("libmkl") != std::string_view::npos;
  if (!reference || optimised) return std::nullopt;
  return "trainq-train: warning: the reference BLAS is loaded; training is several times slower "
         "than with OpenBLAS (apt-get install libopenblas0)";
}

std::string ReadProcMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool SetBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  auto fn = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (fn == nullptr) return false;
  fn(threads);
  return true;
}

void KeepFreedMemory() {
  ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace trainq::trainer
