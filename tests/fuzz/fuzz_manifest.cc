// trainq.yaml (agent/repo/manifest.h): whoever can push to a watched branch
// writes it, and serve parses it on every push.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/repo/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)trainq::ParseManifest(text, "trainq.yaml");
  return 0;
}
