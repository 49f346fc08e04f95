// A model of K replicas trained as one: every parameter is stacked along a
// leading replica dimension, activations are [K, batch, ...], and linear
// layers run as batched matrix products (torch::baddbmm). A single run is the
// case K = 1, so fused and single runs share one code path.
//
// Replica k draws its initial weights and its dropout masks from generators
// seeded by its own run seed, on the CPU, so replica k of a fused model starts
// from exactly the weights of a single run with that seed (on any device).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "trainer/spec.h"

namespace trainq::trainer {

struct ForwardContext {
  bool training = false;
  // One CPU generator per replica for dropout masks (training only).
  std::vector<at::Generator>* dropout_generators = nullptr;
  // [K] float, 1 for replicas still training; batchnorm updates its running
  // statistics only where it is 1 (a replica stopped early stays frozen).
  torch::Tensor active;
};

class Layer {
 public:
  virtual ~Layer() = default;
  // x: [K, B, ...per-sample shape].
  virtual torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) = 0;
  // Trainable parameters, stacked [K, ...].
  virtual std::vector<torch::Tensor> Parameters() { return {}; }
  // Non-trainable state (batchnorm running statistics), stacked [K, ...].
  virtual std::vector<torch::Tensor> Buffers() { return {}; }
};

// A linear layer's stacked parameters: w [K, in, out], b [K, 1, out]
// (undefined without bias), and whether a ReLU follows it.
struct DenseLayer {
  torch::Tensor w, b;
  bool relu = false;
};

class FusedModel {
 public:
  // Builds the layers for `input_shape` (per sample) and initialises replica k
  // from seeds[k]. Shape errors are kInvalidArgument naming the layer.
  static Result<std::unique_ptr<FusedModel>> Build(const ModelSpec& spec, const std::vector<std::int64_t>& input_shape,
                                                   const std::vector<std::uint64_t>& seeds, torch::Device device);

  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx);
  std::vector<torch::Tensor> Parameters() const;
  std::vector<torch::Tensor> Buffers() const;
  // The layers, when the model is a stack of linear layers each optionally
  // followed by a ReLU (and nothing else): the CPU fast path (fast_mlp.h).
  std::optional<std::vector<DenseLayer>> DenseStack() const;
  std::int64_t replicas() const { return replicas_; }
  // Per-sample output shape.
  const std::vector<std::int64_t>& output_shape() const { return output_shape_; }
  // Where in the spec the last layer was written (for shape-mismatch messages).
  const std::string& last_layer_where() const { return last_layer_where_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::int64_t replicas_ = 1;
  std::vector<std::int64_t> output_shape_;
  std::string last_layer_where_;
};

}  // namespace trainq::trainer
