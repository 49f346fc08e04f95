// EC2 query API answers (cloud/mini_xml.h): bytes from the network (or from
// whatever answers at a misconfigured `endpoint:`), walked the way the EC2
// provider walks them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cloud/mini_xml.h"

namespace {

void Walk(const trainq::cloud::XmlNode& n, int depth) {
  if (depth > 64) return;
  (void)n.Text("instanceState/name");
  (void)n.Find("Errors/Error");
  for (const auto* c : n.Children("item")) Walk(*c, depth + 1);
  if (const auto* set = n.Child("reservationSet")) Walk(*set, depth + 1);
  if (const auto* set = n.Child("instancesSet")) Walk(*set, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view xml(reinterpret_cast<const char*>(data), size);
  auto root = trainq::cloud::ParseXml(xml);
  if (root) Walk(*root, 0);
  return 0;
}
