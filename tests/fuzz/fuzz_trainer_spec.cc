// A trainer spec (trainer/spec_tree.h, trainer/spec.h): part of a pushed
// commit; the agent parses it at submit to refuse a bad one before queueing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainer/spec.h"
#include "trainer/spec_tree.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tree = trainq::trainer::ParseSpecText(text, "spec.yaml");
  if (tree) (void)trainq::trainer::ParseSpec(*tree, "spec.yaml");
  return 0;
}
