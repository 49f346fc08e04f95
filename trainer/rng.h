// Seed derivation and shuffles that give the same numbers on every platform.
//
// std::shuffle and std::uniform_int_distribution are implementation-defined,
// so trainq-train draws its own: splitmix64 to derive independent streams from
// one seed, and a Fisher-Yates shuffle over std::mt19937_64 (whose output
// sequence the standard fixes) with rejection sampling for the bound.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace trainq::trainer {

// One step of splitmix64: a well-mixed 64-bit value from `x`.
std::uint64_t SplitMix64(std::uint64_t x);

// An independent seed for `stream` (init, dropout, shuffle, ...) of run seed `seed`.
std::uint64_t DeriveSeed(std::uint64_t seed, std::uint64_t stream);

// The streams a run draws from; each gets its own generator.
inline constexpr std::uint64_t kStreamInit = 1;
inline constexpr std::uint64_t kStreamDropout = 2;
inline constexpr std::uint64_t kStreamShuffle = 3;
inline constexpr std::uint64_t kStreamMacroOrder = 4;

// Uniform integer in [0, bound) (bound > 0), without modulo bias.
std::uint64_t UniformBelow(std::mt19937_64& gen, std::uint64_t bound);

// Shuffles `v` in place (Fisher-Yates).
template <typename T>
void Shuffle(std::vector<T>& v, std::mt19937_64& gen) {
  for (std::size_t i = v.size(); i > 1; --i) {
    std::size_t j = static_cast<std::size_t>(UniformBelow(gen, i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace trainq::trainer
