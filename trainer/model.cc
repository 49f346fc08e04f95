#include "trainer/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <cstring>

#include <cmath>
#include <numeric>

#include "trainer/cpu_kernels.h"
#include "trainer/fast_mlp.h"
#include "trainer/rng.h"

namespace trainq::trainer {
namespace {

using Shape = std::vector<std::int64_t>;

std::string ShapeText(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::int64_t Numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

// Draws each replica's slice of a parameter from that replica's generator.
class Initializer {
 public:
  Initializer(const std::vector<std::uint64_t>& seeds, torch::Device device) : device_(device) {
    for (std::uint64_t s : seeds) gens_.push_back(at::make_generator<at::CPUGeneratorImpl>(DeriveSeed(s, kStreamInit)));
  }
  torch::Tensor Uniform(const Shape& shape, double bound) {
    std::vector<torch::Tensor> parts;
    for (auto& g : gens_) parts.push_back(torch::empty(shape).uniform_(-bound, bound, g));
    return Finish(torch::stack(parts));
  }
  torch::Tensor Normal(const Shape& shape) {
    std::vector<torch::Tensor> parts;
    for (auto& g : gens_) parts.push_back(torch::empty(shape).normal_(0.0, 1.0, g));
    return Finish(torch::stack(parts));
  }
  torch::Tensor Constant(const Shape& shape, double value) {
    Shape full{static_cast<std::int64_t>(gens_.size())};
    full.insert(full.end(), shape.begin(), shape.end());
    return Finish(torch::full(full, value));
  }
  torch::Tensor Buffer(const Shape& shape, double value) {
    Shape full{static_cast<std::int64_t>(gens_.size())};
    full.insert(full.end(), shape.begin(), shape.end());
    return torch::full(full, value).to(device_);
  }

 private:
  torch::Tensor Finish(const torch::Tensor& t) { return t.to(device_).set_requires_grad(true); }
  std::vector<at::Generator> gens_;
  torch::Device device_;
};

// y = x w + b for K replicas at once on the CPU: one BLAS call per replica and
// product, without the per-replica dispatch of torch::baddbmm (which loops
// over the batch through addmm_ when libtorch has no MKL). x [K, N, in],
// w [K, in, out], b [K, 1, out], all float32 and contiguous. With `relu` the
// ReLU that follows is applied in place (one op and one buffer fewer).
struct CpuBatchedLinear : public torch::autograd::Function<CpuBatchedLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b, bool relu) {
    const std::int64_t k = x.size(0), n = x.size(1), in = x.size(2), out = w.size(2);
    torch::Tensor y = torch::empty({k, n, out}, x.options());
    const float* xd = x.data_ptr<float>();
    const float* wd = w.data_ptr<float>();
    const float* bd = b.data_ptr<float>();
    float* yd = y.data_ptr<float>();
    const SgemmFn sgemm = LoadedSgemm();
    for (std::int64_t r = 0; r < k; ++r) {
      float* yr = yd + r * n * out;
      for (std::int64_t i = 0; i < n; ++i) std::memcpy(yr + i * out, bd + r * out, sizeof(float) * out);
      RowMajorGemm(sgemm, false, false, static_cast<int>(n), static_cast<int>(out), static_cast<int>(in),
                   xd + r * n * in, wd + r * in * out, 1.0f, yr);
    }
    if (relu) {
      ReluInPlace(yd, k * n * out);
      ctx->save_for_backward({x, w, y});
    } else {
      ctx->save_for_backward({x, w});
    }
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    torch::Tensor g = grads[0].contiguous();
    const std::int64_t k = x.size(0), n = x.size(1), in = x.size(2), out = w.size(2);
    if (saved.size() == 3) {  // through the ReLU: zero where the output is not positive
      const float* yd = saved[2].data_ptr<float>();
      const float* src = g.data_ptr<float>();
      torch::Tensor masked = torch::empty_like(g);
      float* dst = masked.data_ptr<float>();
      ReluBackward(yd, src, dst, k * n * out);
      g = masked;
    }
    const SgemmFn sgemm = LoadedSgemm();
    const float* xd = x.data_ptr<float>();
    const float* wd = w.data_ptr<float>();
    const float* gd = g.data_ptr<float>();
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) {
      gx = torch::empty_like(x);
      float* d = gx.data_ptr<float>();
      for (std::int64_t r = 0; r < k; ++r) {  // gx = g w^T
        RowMajorGemm(sgemm, false, true, static_cast<int>(n), static_cast<int>(in), static_cast<int>(out),
                     gd + r * n * out, wd + r * in * out, 0.0f, d + r * n * in);
      }
    }
    if (ctx->needs_input_grad(1)) {
      gw = torch::empty_like(w);
      float* d = gw.data_ptr<float>();
      for (std::int64_t r = 0; r < k; ++r) {  // gw = x^T g
        RowMajorGemm(sgemm, true, false, static_cast<int>(in), static_cast<int>(out), static_cast<int>(n),
                     xd + r * n * in, gd + r * n * out, 0.0f, d + r * in * out);
      }
    }
    if (ctx->needs_input_grad(2)) gb = g.sum(1, /*keepdim=*/true);
    return {gx, gw, gb, torch::Tensor()};
  }
};

bool UseCpuBatchedLinear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto ok = [](const torch::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == torch::kFloat32; };
  return b.defined() && ok(x) && ok(w) && ok(b) && w.is_contiguous() && b.is_contiguous() && LoadedSgemm() != nullptr &&
         x.numel() < (std::int64_t{1} << 31) && w.numel() < (std::int64_t{1} << 31);
}

// Applies a stacked linear map to the last dimension: x [K, ..., in] -> [K, ..., out],
// then a ReLU if `relu`.
torch::Tensor BatchedLinear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                            bool relu = false) {
  const std::int64_t k = x.size(0), in = x.size(-1), out = w.size(2);
  auto sizes = x.sizes().vec();
  torch::Tensor flat = x.reshape({k, -1, in});
  torch::Tensor y;
  if (UseCpuBatchedLinear(flat, w, b) && flat.size(1) > 0) {
    y = CpuBatchedLinear::apply(flat.contiguous(), w, b, relu);
  } else {
    y = b.defined() ? torch::baddbmm(b, flat, w) : torch::bmm(flat, w);
    if (relu) y = torch::relu(y);
  }
  sizes.back() = out;
  return y.view(sizes);
}

class Linear : public Layer {
 public:
  Linear(std::int64_t in, std::int64_t out, bool bias, Initializer& init) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    w_ = init.Uniform({in, out}, bound);
    if (bias) b_ = init.Uniform({1, out}, bound);
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    return BatchedLinear(x, w_, b_, fused_relu_);
  }
  std::vector<torch::Tensor> Parameters() override {
    return b_.defined() ? std::vector<torch::Tensor>{w_, b_} : std::vector<torch::Tensor>{w_};
  }
  // The relu layer that follows is applied here instead.
  void FuseRelu() { fused_relu_ = true; }
  DenseLayer Dense() const { return DenseLayer{w_, b_, fused_relu_}; }

 private:
  torch::Tensor w_, b_;
  bool fused_relu_ = false;
};

class Activation : public Layer {
 public:
  explicit Activation(std::string type) : type_(std::move(type)) {}
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    if (type_ == "relu") return torch::relu(x);
    if (type_ == "tanh") return torch::tanh(x);
    if (type_ == "sigmoid") return torch::sigmoid(x);
    return torch::gelu(x);
  }

 private:
  std::string type_;
};

class Dropout : public Layer {
 public:
  explicit Dropout(double p) : p_(p) {}
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override {
    if (!ctx.training || p_ == 0.0) return x;
    // Each replica's mask comes from its own generator, drawn on the CPU so
    // that masks do not depend on the device.
    std::vector<torch::Tensor> masks;
    auto& gens = *ctx.dropout_generators;
    auto shape = x.sizes().slice(1).vec();
    for (std::int64_t k = 0; k < x.size(0); ++k) {
      masks.push_back(torch::empty(shape).bernoulli_(1.0 - p_, gens[static_cast<std::size_t>(k)]));
    }
    torch::Tensor mask = torch::stack(masks).to(x.device());
    return x * mask * (1.0 / (1.0 - p_));
  }

 private:
  double p_;
};

// Normalises over the batch (and spatial dims for [C, H, W] samples) per channel.
class BatchNorm : public Layer {
 public:
  BatchNorm(std::int64_t channels, bool spatial, double eps, double momentum, Initializer& init)
      : spatial_(spatial), eps_(eps), momentum_(momentum) {
    gamma_ = init.Constant({channels}, 1.0);
    beta_ = init.Constant({channels}, 0.0);
    mean_ = init.Buffer({channels}, 0.0);
    var_ = init.Buffer({channels}, 1.0);
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override {
    const std::int64_t k = x.size(0), c = gamma_.size(1);
    // View parameters as [K, 1, C] or [K, 1, C, 1, 1] to broadcast.
    Shape view{k, 1, c};
    std::vector<std::int64_t> dims{1};
    if (spatial_) {
      view = {k, 1, c, 1, 1};
      dims = {1, 3, 4};
    }
    torch::Tensor mean, var;
    if (ctx.training) {
      mean = x.mean(dims, /*keepdim=*/true);
      var = (x - mean).pow(2).mean(dims, /*keepdim=*/true);
      torch::NoGradGuard no_grad;
      const double n = static_cast<double>(x.numel() / (k * c));
      torch::Tensor batch_mean = mean.detach().reshape({k, c});
      torch::Tensor batch_var = var.detach().reshape({k, c}) * (n / std::max(1.0, n - 1.0));
      torch::Tensor rate = ctx.active.view({k, 1}) * momentum_;
      mean_.add_(rate * (batch_mean - mean_));
      var_.add_(rate * (batch_var - var_));
    } else {
      mean = mean_.view(view);
      var = var_.view(view);
    }
    return (x - mean) * torch::rsqrt(var + eps_) * gamma_.view(view) + beta_.view(view);
  }
  std::vector<torch::Tensor> Parameters() override { return {gamma_, beta_}; }
  std::vector<torch::Tensor> Buffers() override { return {mean_, var_}; }

 private:
  bool spatial_;
  double eps_, momentum_;
  torch::Tensor gamma_, beta_, mean_, var_;
};

class LayerNorm : public Layer {
 public:
  LayerNorm(std::int64_t features, double eps, Initializer& init) : eps_(eps) {
    gamma_ = init.Constant({features}, 1.0);
    beta_ = init.Constant({features}, 0.0);
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    Shape view(static_cast<std::size_t>(x.dim()), 1);
    view.front() = x.size(0);
    view.back() = x.size(-1);
    torch::Tensor mean = x.mean(-1, true);
    torch::Tensor var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) * torch::rsqrt(var + eps_) * gamma_.view(view) + beta_.view(view);
  }
  std::vector<torch::Tensor> Parameters() override { return {gamma_, beta_}; }

 private:
  double eps_;
  torch::Tensor gamma_, beta_;
};

// K replicas of a convolution as one grouped convolution: the replicas'
// channels are laid side by side and groups = K keeps them apart.
class Conv2d : public Layer {
 public:
  Conv2d(std::int64_t in, const LayerSpec& s, Initializer& init) : stride_(s.stride), padding_(s.padding) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in * s.kernel * s.kernel));
    w_ = init.Uniform({s.out, in, s.kernel, s.kernel}, bound);
    if (s.bias) b_ = init.Uniform({s.out}, bound);
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    const std::int64_t k = x.size(0), b = x.size(1), c = x.size(2);
    torch::Tensor in = x.transpose(0, 1).reshape({b, k * c, x.size(3), x.size(4)});
    torch::Tensor w = w_.reshape({k * w_.size(1), c, w_.size(3), w_.size(4)});
    torch::Tensor bias = b_.defined() ? b_.reshape({-1}) : torch::Tensor();
    torch::Tensor y = torch::conv2d(in, w, bias, stride_, padding_, 1, k);
    return y.view({b, k, w_.size(1), y.size(2), y.size(3)}).transpose(0, 1);
  }
  std::vector<torch::Tensor> Parameters() override {
    return b_.defined() ? std::vector<torch::Tensor>{w_, b_} : std::vector<torch::Tensor>{w_};
  }

 private:
  std::int64_t stride_, padding_;
  torch::Tensor w_, b_;
};

class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::int64_t kernel, std::int64_t stride) : kernel_(kernel), stride_(stride) {}
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    const std::int64_t k = x.size(0), b = x.size(1);
    torch::Tensor y = torch::max_pool2d(x.reshape({k * b, x.size(2), x.size(3), x.size(4)}), kernel_, stride_);
    return y.view({k, b, y.size(1), y.size(2), y.size(3)});
  }

 private:
  std::int64_t kernel_, stride_;
};

class Reshape : public Layer {
 public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    Shape full{x.size(0), x.size(1)};
    full.insert(full.end(), shape_.begin(), shape_.end());
    return x.reshape(full);
  }

 private:
  Shape shape_;
};

// Integer ids [K, B, ...] -> vectors [K, B, ..., dim]; each replica looks up
// its own table in the stacked [K * vocab, dim] matrix.
class Embedding : public Layer {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim, Initializer& init) : vocab_(vocab) {
    w_ = init.Normal({vocab, dim});
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    torch::Tensor ids = x.to(torch::kLong);
    if ((ids < 0).any().item<bool>() || (ids >= vocab_).any().item<bool>()) {
      throw std::runtime_error("embedding: an input id is outside [0, " + std::to_string(vocab_) + ")");
    }
    const std::int64_t k = x.size(0);
    Shape offset_view(static_cast<std::size_t>(x.dim()), 1);
    offset_view.front() = k;
    torch::Tensor offsets = (torch::arange(k, ids.options()) * vocab_).view(offset_view);
    torch::Tensor flat = (ids + offsets).reshape({-1});
    auto sizes = x.sizes().vec();
    sizes.push_back(w_.size(2));
    return w_.reshape({k * vocab_, w_.size(2)}).index_select(0, flat).view(sizes);
  }
  std::vector<torch::Tensor> Parameters() override { return {w_}; }

 private:
  std::int64_t vocab_;
  torch::Tensor w_;
};

// LSTM and GRU over [K, B, T, F], one time step at a time with batched matrix
// products; the input projection of all steps is computed up front.
class Recurrent : public Layer {
 public:
  Recurrent(bool lstm, std::int64_t in, std::int64_t hidden, bool bias, bool sequence, Initializer& init)
      : lstm_(lstm), hidden_(hidden), sequence_(sequence) {
    const std::int64_t gates = (lstm ? 4 : 3) * hidden;
    const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
    w_ih_ = init.Uniform({in, gates}, bound);
    w_hh_ = init.Uniform({hidden, gates}, bound);
    if (bias) {
      b_ih_ = init.Uniform({1, gates}, bound);
      b_hh_ = init.Uniform({1, gates}, bound);
    }
  }
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext&) override {
    const std::int64_t k = x.size(0), b = x.size(1), t_len = x.size(2);
    torch::Tensor xw = BatchedLinear(x, w_ih_, b_ih_);  // [K, B, T, G]
    torch::Tensor h = torch::zeros({k, b, hidden_}, x.options());
    torch::Tensor c = torch::zeros({k, b, hidden_}, x.options());
    std::vector<torch::Tensor> outputs;
    for (std::int64_t t = 0; t < t_len; ++t) {
      torch::Tensor gx = xw.select(2, t);
      torch::Tensor gh = b_hh_.defined() ? torch::baddbmm(b_hh_, h, w_hh_) : torch::bmm(h, w_hh_);
      if (lstm_) {
        auto g = (gx + gh).chunk(4, -1);
        c = torch::sigmoid(g[1]) * c + torch::sigmoid(g[0]) * torch::tanh(g[2]);
        h = torch::sigmoid(g[3]) * torch::tanh(c);
      } else {
        auto ix = gx.chunk(3, -1);
        auto ih = gh.chunk(3, -1);
        torch::Tensor r = torch::sigmoid(ix[0] + ih[0]);
        torch::Tensor z = torch::sigmoid(ix[1] + ih[1]);
        torch::Tensor n = torch::tanh(ix[2] + r * ih[2]);
        h = (1 - z) * n + z * h;
      }
      if (sequence_) outputs.push_back(h);
    }
    return sequence_ ? torch::stack(outputs, 2) : h;
  }
  std::vector<torch::Tensor> Parameters() override {
    std::vector<torch::Tensor> p{w_ih_, w_hh_};
    if (b_ih_.defined()) p.insert(p.end(), {b_ih_, b_hh_});
    return p;
  }

 private:
  bool lstm_;
  std::int64_t hidden_;
  bool sequence_;
  torch::Tensor w_ih_, w_hh_, b_ih_, b_hh_;
};

std::unexpected<Error> ShapeError(const LayerSpec& l, const std::string& msg) {
  return Fail(ErrorKind::kInvalidArgument, l.where + " (" + l.type + "): " + msg);
}

}  // namespace

Result<std::unique_ptr<FusedModel>> FusedModel::Build(const ModelSpec& spec, const Shape& input_shape,
                                                      const std::vector<std::uint64_t>& seeds, torch::Device device) {
  auto model = std::make_unique<FusedModel>();
  model->replicas_ = static_cast<std::int64_t>(seeds.size());
  Initializer init(seeds, device);
  Shape shape = input_shape;
  Linear* previous_linear = nullptr;  // the last layer built, if it is a linear layer
  for (const LayerSpec& l : spec.layers) {
    const std::string got = "got per-sample shape " + ShapeText(shape);
    std::unique_ptr<Layer> layer;
    if (l.type == "relu" && previous_linear != nullptr) {
      previous_linear->FuseRelu();
      previous_linear = nullptr;
      model->last_layer_where_ = l.where;
      continue;
    }
    previous_linear = nullptr;
    if (l.type == "linear") {
      auto linear = std::make_unique<Linear>(shape.back(), l.out, l.bias, init);
      previous_linear = linear.get();
      layer = std::move(linear);
      shape.back() = l.out;
    } else if (l.type == "relu" || l.type == "tanh" || l.type == "gelu" || l.type == "sigmoid") {
      layer = std::make_unique<Activation>(l.type);
    } else if (l.type == "dropout") {
      layer = std::make_unique<Dropout>(l.p);
    } else if (l.type == "batchnorm") {
      if (shape.size() != 1 && shape.size() != 3) {
        return ShapeError(l, "needs [features] or [channels, height, width] samples, " + got);
      }
      layer = std::make_unique<BatchNorm>(shape[0], shape.size() == 3, l.eps, l.momentum, init);
    } else if (l.type == "layernorm") {
      layer = std::make_unique<LayerNorm>(shape.back(), l.eps, init);
    } else if (l.type == "conv2d") {
      if (shape.size() != 3) {
        return ShapeError(l, "needs [channels, height, width] samples (add a reshape layer), " + got);
      }
      const std::int64_t h = (shape[1] + 2 * l.padding - l.kernel) / l.stride + 1;
      const std::int64_t w = (shape[2] + 2 * l.padding - l.kernel) / l.stride + 1;
      if (h <= 0 || w <= 0) return ShapeError(l, "the kernel is larger than the padded input, " + got);
      layer = std::make_unique<Conv2d>(shape[0], l, init);
      shape = {l.out, h, w};
    } else if (l.type == "maxpool2d") {
      if (shape.size() != 3) return ShapeError(l, "needs [channels, height, width] samples, " + got);
      const std::int64_t h = (shape[1] - l.kernel) / l.stride + 1;
      const std::int64_t w = (shape[2] - l.kernel) / l.stride + 1;
      if (h <= 0 || w <= 0) return ShapeError(l, "the kernel is larger than the input, " + got);
      layer = std::make_unique<MaxPool2d>(l.kernel, l.stride);
      shape = {shape[0], h, w};
    } else if (l.type == "flatten") {
      layer = std::make_unique<Reshape>(Shape{Numel(shape)});
      shape = {Numel(shape)};
    } else if (l.type == "reshape") {
      Shape target = l.shape;
      std::int64_t known = 1;
      for (std::int64_t d : target) known *= d == -1 ? 1 : d;
      for (std::int64_t& d : target) {
        if (d == -1) d = known > 0 ? Numel(shape) / known : 0;
      }
      if (Numel(target) != Numel(shape)) {
        return ShapeError(l, "cannot reshape " + got + " to " + ShapeText(l.shape));
      }
      layer = std::make_unique<Reshape>(target);
      shape = target;
    } else if (l.type == "embedding") {
      layer = std::make_unique<Embedding>(l.vocab, l.dim, init);
      shape.push_back(l.dim);
    } else if (l.type == "lstm" || l.type == "gru") {
      if (shape.size() != 2) {
        return ShapeError(l, "needs [steps, features] samples (add a reshape or embedding layer), " + got);
      }
      layer = std::make_unique<Recurrent>(l.type == "lstm", shape[1], l.hidden, l.bias, l.sequence, init);
      shape = l.sequence ? Shape{shape[0], l.hidden} : Shape{l.hidden};
    } else {
      return ShapeError(l, "unknown layer type");
    }
    model->layers_.push_back(std::move(layer));
    model->last_layer_where_ = l.where;
  }
  model->output_shape_ = shape;
  return model;
}

torch::Tensor FusedModel::Forward(const torch::Tensor& x, ForwardContext& ctx) {
  torch::Tensor h = x;
  for (auto& layer : layers_) h = layer->Forward(h, ctx);
  return h;
}

std::vector<torch::Tensor> FusedModel::Parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& l : layers_) {
    auto p = l->Parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::optional<std::vector<DenseLayer>> FusedModel::DenseStack() const {
  std::vector<DenseLayer> out;
  for (const auto& l : layers_) {
    const auto* linear = dynamic_cast<const Linear*>(l.get());
    if (linear == nullptr) return std::nullopt;
    out.push_back(linear->Dense());
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::vector<torch::Tensor> FusedModel::Buffers() const {
  std::vector<torch::Tensor> out;
  for (const auto& l : layers_) {
    auto b = l->Buffers();
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace trainq::trainer
