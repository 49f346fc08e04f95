// server.yaml (agent/triggers/server_config.h): written by the operator, but
// parsed with the same care: a typo must give a message, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/triggers/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)trainq::ParseServerConfig(text, "server.yaml");
  return 0;
}
