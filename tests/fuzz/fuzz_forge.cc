// Webhook payloads (agent/triggers/forge.h): the first byte picks the forge
// and the event, the rest is the body. Anyone who can reach /hooks/* sends
// these bytes; only the signature check stands before the parser, and a
// repository's secret is not always secret (a leaked CI log, a former admin).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/triggers/forge.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using trainq::ForgeKind;
  static constexpr ForgeKind kForges[] = {ForgeKind::kGithub, ForgeKind::kGitlab,
                                          ForgeKind::kGitea};
  const ForgeKind forge = kForges[data[0] % 3];
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 0x80) {
    auto pr = trainq::ParsePullRequestEvent(forge, body);
    if (pr) (void)pr->HeadRef(forge);
  } else {
    auto push = trainq::ParsePushEvent(forge, body);
    if (push) (void)push->branch();
  }
  (void)trainq::NormaliseRepoUrl(body.substr(0, 512));
  return 0;
}
