// Element-wise loops on float arrays for the CPU paths of training, compiled
// vectorised (see cpu_kernels.cc). Torch-free.
//
// Optimizer updates for the stacked parameters of K replicas: one read and one
// write of each array per step, where the tensor formulation makes five to
// eight passes.
#pragma once

#include <cstdint>

namespace trainq::trainer {

struct AdamConstants {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0;  // L2 (adam) or decoupled (adamw)
  bool decoupled = false;  // adamw
  float bias_correction1 = 1, sqrt_bias_correction2 = 1;
};

// Adam/AdamW on n elements with learning rate lr:
//   g += wd * p (adam);  p *= 1 - lr * wd (adamw)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
//   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
void AdamUpdate(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, const AdamConstants& c);

// SGD with L2 weight decay, momentum and Nesterov, as PyTorch's SGD:
//   g += wd * p;  buf = first ? g : momentum buf + g;  d = nesterov ? g + momentum buf : buf;  p -= lr d
// buf is unused (may be null) when momentum is 0.
void SgdUpdate(float* p, const float* g, float* buf, std::int64_t n, float lr, float weight_decay, float momentum,
               bool nesterov, bool first);

// ReLU in place: x = max(x, 0).
void ReluInPlace(float* x, std::int64_t n);

// The gradient through a ReLU whose output is y: out = y > 0 ? g : 0.
void ReluBackward(const float* y, const float* g, float* out, std::int64_t n);

}  // namespace trainq::trainer
