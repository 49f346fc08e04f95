#include "trainer/fast_mlp.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

// Compiled like cpu_kernels.cc (-O3, -fno-math-errno, -ffp-contract=off): no
// FMA contraction, so the element-wise results do not depend on the CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINQ_CLONES
#endif

namespace trainq::trainer {
namespace {

// y = y > 0 ? g : 0, in place on g.
TRAINQ_CLONES
void MaskByPositive(const float* __restrict y, float* __restrict g, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) g[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

TRAINQ_CLONES
void Relu(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// out[j] = sum_i g[i, j] over `rows` rows of `cols`.
TRAINQ_CLONES
void ColumnSums(const float* __restrict g, int rows, int cols, float* __restrict out) {
  for (int j = 0; j < cols; ++j) out[j] = 0.0f;
  for (int i = 0; i < rows; ++i) {
    const float* row = g + static_cast<std::int64_t>(i) * cols;
    for (int j = 0; j < cols; ++j) out[j] += row[j];
  }
}

// Mean cross-entropy of `n` rows of logits z [n, c] against class ids; writes
// its gradient with respect to z into dz (softmax minus one-hot, over n).
// The losses are summed in float, as libtorch's mean is, so that a loss that
// overflows does so on both paths.
float CrossEntropy(const float* z, int n, int c, const std::int64_t* labels, const std::int64_t* rows, float* dz) {
  float total = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int i = 0; i < n; ++i) {
    const float* zi = z + static_cast<std::int64_t>(i) * c;
    float* di = dz + static_cast<std::int64_t>(i) * c;
    const std::int64_t y = labels[rows[i]];
    if (y < 0 || y >= c) {
      throw std::invalid_argument("cross_entropy: label " + std::to_string(y) + " is outside [0, " +
                                  std::to_string(c) + ")");
    }
    float m = zi[0];
    for (int j = 1; j < c; ++j) m = std::max(m, zi[j]);
    float s = 0;
    for (int j = 0; j < c; ++j) s += std::exp(zi[j] - m);
    const float lse = m + std::log(s);
    total += lse - zi[y];
    for (int j = 0; j < c; ++j) di[j] = std::exp(zi[j] - lse) * inv_n;
    di[y] -= inv_n;
  }
  return total / static_cast<float>(n);
}

}  // namespace

SgemmFn LoadedSgemm() {
  static const SgemmFn fn = reinterpret_cast<SgemmFn>(::dlsym(RTLD_DEFAULT, "sgemm_"));
  return fn;
}

void RowMajorGemm(SgemmFn sgemm, bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta,
                  float* c) {
  // Column-major, this is C^T = op(B)^T op(A)^T.
  const char tra = tb ? 'T' : 'N', trb = ta ? 'T' : 'N';
  const int lda = tb ? k : n, ldb = ta ? m : k;
  const float alpha = 1.0f;
  sgemm(&tra, &trb, &n, &m, &k, &alpha, b, &lda, a, &ldb, &beta, c, &n);
}

DenseStackStep::DenseStackStep(std::vector<DenseShape> layers, int max_batch, SgemmFn sgemm)
    : layers_(std::move(layers)), max_batch_(max_batch), sgemm_(sgemm) {
  const std::size_t rows = static_cast<std::size_t>(std::max(1, max_batch_));
  int widest = 1;
  act_.emplace_back(rows * static_cast<std::size_t>(layers_.empty() ? 1 : layers_.front().in));
  for (const DenseShape& l : layers_) {
    act_.emplace_back(rows * static_cast<std::size_t>(l.out));
    grad_w_.emplace_back(static_cast<std::size_t>(l.in) * static_cast<std::size_t>(l.out));
    grad_bias_.emplace_back(l.bias ? static_cast<std::size_t>(l.out) : 0);
    widest = std::max({widest, l.in, l.out});
  }
  grad_a_.resize(rows * static_cast<std::size_t>(widest));
  grad_b_.resize(rows * static_cast<std::size_t>(widest));
}

float DenseStackStep::Step(const std::vector<DenseWeights>& weights, const float* x, const std::int64_t* labels,
                           const std::int64_t* rows, int n, const Update& update) {
  if (n <= 0 || n > max_batch_) throw std::invalid_argument("dense step: batch of " + std::to_string(n) + " rows");
  const int layers = static_cast<int>(layers_.size());
  // Gather the batch's rows.
  const int features = layers_.front().in;
  float* in = act_[0].data();
  for (int i = 0; i < n; ++i) {
    std::memcpy(in + static_cast<std::int64_t>(i) * features, x + rows[i] * features, sizeof(float) * features);
  }
  // Forward: out = in w + b, then the ReLU in place.
  for (int l = 0; l < layers; ++l) {
    const DenseShape& s = layers_[static_cast<std::size_t>(l)];
    const DenseWeights& p = weights[static_cast<std::size_t>(l)];
    float* out = act_[static_cast<std::size_t>(l) + 1].data();
    if (p.b != nullptr) {
      for (int i = 0; i < n; ++i) std::memcpy(out + static_cast<std::int64_t>(i) * s.out, p.b, sizeof(float) * s.out);
    }
    RowMajorGemm(sgemm_, false, false, n, s.out, s.in, act_[static_cast<std::size_t>(l)].data(), p.w,
                 p.b != nullptr ? 1.0f : 0.0f, out);
    if (s.relu) Relu(out, static_cast<std::int64_t>(n) * s.out);
  }
  // Loss and its gradient with respect to the last layer's output.
  const int classes = layers_.back().out;
  float* cur = grad_a_.data();
  float* next = grad_b_.data();
  const float loss = CrossEntropy(act_.back().data(), n, classes, labels, rows, cur);
  // Backward, last layer first.
  for (int l = layers - 1; l >= 0; --l) {
    const DenseShape& s = layers_[static_cast<std::size_t>(l)];
    const DenseWeights& p = weights[static_cast<std::size_t>(l)];
    const float* out = act_[static_cast<std::size_t>(l) + 1].data();
    const float* input = act_[static_cast<std::size_t>(l)].data();
    if (s.relu) MaskByPositive(out, cur, static_cast<std::int64_t>(n) * s.out);
    float* gw = grad_w_[static_cast<std::size_t>(l)].data();
    float* gb = p.b != nullptr ? grad_bias_[static_cast<std::size_t>(l)].data() : nullptr;
    RowMajorGemm(sgemm_, true, false, s.in, s.out, n, input, cur, 0.0f, gw);  // gw = in^T g
    if (gb != nullptr) ColumnSums(cur, n, s.out, gb);
    if (l > 0) RowMajorGemm(sgemm_, false, true, n, s.in, s.out, cur, p.w, 0.0f, next);  // g_in = g w^T
    update(l, gw, gb);
    std::swap(cur, next);
  }
  return loss;
}

}  // namespace trainq::trainer
