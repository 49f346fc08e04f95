// The optimizers (SGD, Adam, AdamW) and learning-rate schedules, element-wise
// over stacked parameters [K, ...]: every operation acts on each replica's
// slice alone, with a per-replica learning rate (0 for a replica that stopped
// early). The formulas are PyTorch's (docs/TRAINER.md, "optimizer").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "trainer/cpu_kernels.h"
#include "trainer/spec.h"

namespace trainq::trainer {

class Optimizer {
 public:
  Optimizer(const OptimizerSpec& spec, std::vector<torch::Tensor> params);

  // Counts a step and prepares its constants; Step does this itself, the
  // fast path calls it once per batch before UpdateSlice.
  void BeginStep();

  // Whether UpdateSlice may be used: every parameter and its state are
  // contiguous float32 on the CPU.
  bool CpuSlices() const;

  // Updates replica r's slice of parameter i from its gradient g (the slice's
  // size), with the constants of the step BeginStep began.
  void UpdateSlice(std::size_t i, std::int64_t r, const float* g, float lr);

  // One step from the parameters' gradients, which it then resets.
  // lr: [K] on the parameters' device. When every replica has the same rate
  // (`uniform_lr`, no replica stopped early) the scalar form saves passes.
  // lr_host: the same rates on the host, one per replica (the CPU path).
  void Step(const torch::Tensor& lr, std::optional<double> uniform_lr, const std::vector<float>& lr_host);

 private:
  static bool CpuFloatContiguous(const torch::Tensor& t);
  OptimizerSpec spec_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> state1_, state2_;
  std::int64_t step_ = 0;
  double bc1_ = 1, bc2_ = 1;
  AdamConstants adam_;
};

// The learning rate of `epoch` (0-based) under the spec's schedule.
double LearningRate(const OptimizerSpec& o, std::int64_t epoch, std::int64_t epochs);

}  // namespace trainq::trainer
