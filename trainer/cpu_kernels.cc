#include "trainer/cpu_kernels.h"

#include <cmath>

// Compiled with -fno-math-errno (so that sqrt vectorises) and
// -ffp-contract=off (see CMakeLists.txt); the clones let the loops use
// AVX2/AVX-512 where the CPU has them. IEEE add, multiply, divide and sqrt
// round the same on every ISA and nothing is contracted into an FMA, so the
// results do not depend on the clone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINQ_CLONES
#endif

namespace trainq::trainer {

TRAINQ_CLONES
void AdamUpdate(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                std::int64_t n, float lr, const AdamConstants& c) {
  const float b1 = c.beta1, b2 = c.beta2, one_b1 = 1.0f - c.beta1, one_b2 = 1.0f - c.beta2, eps = c.eps;
  const float step = lr / c.bias_correction1, sbc2 = c.sqrt_bias_correction2;
  const float l2 = c.decoupled ? 0.0f : c.weight_decay;
  const float keep = c.decoupled ? 1.0f - lr * c.weight_decay : 1.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = g[i] + l2 * pi;
    const float mi = b1 * m[i] + one_b1 * gi;
    const float vi = b2 * v[i] + one_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi * keep - step * (mi / (std::sqrt(vi) / sbc2 + eps));
  }
}

TRAINQ_CLONES
void SgdUpdate(float* __restrict p, const float* __restrict g, float* __restrict buf, std::int64_t n, float lr,
               float weight_decay, float momentum, bool nesterov, bool first) {
  if (momentum == 0.0f) {
    for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + weight_decay * p[i]);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * p[i];
    const float bi = first ? gi : momentum * buf[i] + gi;
    buf[i] = bi;
    p[i] -= lr * (nesterov ? gi + momentum * bi : bi);
  }
}

TRAINQ_CLONES
void ReluInPlace(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

TRAINQ_CLONES
void ReluBackward(const float* __restrict y, const float* __restrict g, float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

}  // namespace trainq::trainer
