#include "trainer/rng.h"

namespace trainq::trainer {

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t DeriveSeed(std::uint64_t seed, std::uint64_t stream) {
  return SplitMix64(SplitMix64(seed) ^ (stream * 0xd1b54a32d192ed03ULL));
}

std::uint64_t UniformBelow(std::mt19937_64& gen, std::uint64_t bound) {
  // Reject the top partial range so every residue is equally likely.
  const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % bound + 1) % bound;
  std::uint64_t r;
  do {
    r = gen();
  } while (r > limit);
  return r % bound;
}

}  // namespace trainq::trainer
