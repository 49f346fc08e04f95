// The CPU fast path for stacks of linear layers (each optionally followed by a
// ReLU) trained with cross-entropy: forward, loss and backward of one replica
// on raw float buffers, with the BLAS's sgemm for the products and no torch
// dispatch or autograd graph per step. Torch-free.
//
// For the digits MLP a step is about a dozen small products (64 rows); the
// torch formulation spends as long again in dispatch, autograd bookkeeping,
// allocations and the small element-wise ops, and its optimizer passes run
// over all replicas' stacked parameters (more than the L2 cache holds). Here
// one replica's step runs start to finish, each layer's update is applied
// (through `update`) as soon as its gradient is known, while it is in cache,
// and the scratch buffers are allocated once.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace trainq::trainer {

// The Fortran BLAS sgemm (column-major), as OpenBLAS exports it.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

// The sgemm_ of the BLAS loaded into the process (libtorch's), or null.
SgemmFn LoadedSgemm();

// Row-major C[m, n] = op(A)[m, k] op(B)[k, n] + beta C, where A is stored
// [m, k] ([k, m] if ta) and B [k, n] ([n, k] if tb).
void RowMajorGemm(SgemmFn sgemm, bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta,
                  float* c);

struct DenseShape {
  int in = 0, out = 0;
  bool bias = true;
  bool relu = false;  // a ReLU follows
};

// One replica's parameters of one layer: w [in, out] row-major, b [out] (null without bias).
struct DenseWeights {
  float* w = nullptr;
  float* b = nullptr;
};

class DenseStackStep {
 public:
  // `max_batch`: the most rows a step gets.
  DenseStackStep(std::vector<DenseShape> layers, int max_batch, SgemmFn sgemm);

  // Called per layer, last layer first, with the gradients of its weights
  // (and bias, null without) once the gradient for the layer below has been
  // computed, so that it may update the layer's weights in place.
  using Update = std::function<void(int layer, const float* grad_w, const float* grad_b)>;

  // One training step of one replica on rows `rows[0..n)` of x ([*, features]
  // row-major) with class ids `labels` (indexed like x): forward, mean
  // cross-entropy over the n rows, backward. Returns the mean loss. Throws
  // std::invalid_argument for a label outside [0, classes).
  float Step(const std::vector<DenseWeights>& weights, const float* x, const std::int64_t* labels,
             const std::int64_t* rows, int n, const Update& update);

 private:
  std::vector<DenseShape> layers_;
  int max_batch_;
  SgemmFn sgemm_;
  std::vector<std::vector<float>> act_;  // act_[0]: the input rows; act_[l + 1]: layer l's output
  std::vector<float> grad_a_, grad_b_;   // gradients with respect to activations (ping-pong)
  std::vector<std::vector<float>> grad_w_, grad_bias_;
};

}  // namespace trainq::trainer
