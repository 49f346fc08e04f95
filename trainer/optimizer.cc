#include "trainer/optimizer.h"

#include <cmath>

namespace trainq::trainer {

bool Optimizer::CpuFloatContiguous(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<torch::Tensor> params)
    : spec_(spec), params_(std::move(params)) {
  for (const auto& p : params_) {
    state1_.push_back(torch::zeros_like(p));
    if (spec_.type != "sgd") state2_.push_back(torch::zeros_like(p));
  }
}

void Optimizer::BeginStep() {
  ++step_;
  const double b1 = spec_.beta1, b2 = spec_.beta2, wd = spec_.weight_decay;
  bc1_ = 1.0 - std::pow(b1, static_cast<double>(step_));
  bc2_ = 1.0 - std::pow(b2, static_cast<double>(step_));
  adam_.beta1 = static_cast<float>(b1);
  adam_.beta2 = static_cast<float>(b2);
  adam_.eps = static_cast<float>(spec_.eps);
  adam_.weight_decay = static_cast<float>(wd);
  adam_.decoupled = spec_.type == "adamw";
  adam_.bias_correction1 = static_cast<float>(bc1_);
  adam_.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bc2_));
}

bool Optimizer::CpuSlices() const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!CpuFloatContiguous(params_[i]) || !CpuFloatContiguous(state1_[i]) ||
        (!state2_.empty() && !CpuFloatContiguous(state2_[i]))) {
      return false;
    }
  }
  return true;
}

void Optimizer::UpdateSlice(std::size_t i, std::int64_t r, const float* g, float lr) {
  torch::Tensor& p = params_[i];
  const std::int64_t n = p.numel() / p.size(0);
  float* pd = p.data_ptr<float>() + r * n;
  float* s1 = state1_[i].data_ptr<float>() + r * n;
  if (spec_.type == "sgd") {
    SgdUpdate(pd, g, s1, n, lr, static_cast<float>(spec_.weight_decay), static_cast<float>(spec_.momentum),
              spec_.nesterov, step_ == 1);
  } else {
    AdamUpdate(pd, g, s1, state2_[i].data_ptr<float>() + r * n, n, lr, adam_);
  }
}

void Optimizer::Step(const torch::Tensor& lr, std::optional<double> uniform_lr, const std::vector<float>& lr_host) {
  torch::NoGradGuard no_grad;
  BeginStep();
  const double b1 = spec_.beta1, b2 = spec_.beta2, wd = spec_.weight_decay;
  const double bc1 = bc1_, bc2 = bc2_;
  const AdamConstants& adam = adam_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.grad();
    if (CpuFloatContiguous(p) && CpuFloatContiguous(g) && CpuFloatContiguous(state1_[i]) &&
        (state2_.empty() || CpuFloatContiguous(state2_[i]))) {
      // One pass per replica slice over p, g and the state (see cpu_kernels.h).
      const std::int64_t k = p.size(0), n = p.numel() / k;
      float* pd = p.data_ptr<float>();
      const float* gd = g.data_ptr<float>();
      float* s1 = state1_[i].data_ptr<float>();
      float* s2 = state2_.empty() ? nullptr : state2_[i].data_ptr<float>();
      for (std::int64_t r = 0; r < k; ++r) {
        const float rate = lr_host[static_cast<std::size_t>(r)];
        if (spec_.type == "sgd") {
          SgdUpdate(pd + r * n, gd + r * n, s1 + r * n, n, rate, static_cast<float>(wd),
                    static_cast<float>(spec_.momentum), spec_.nesterov, step_ == 1);
        } else {
          AdamUpdate(pd + r * n, gd + r * n, s1 + r * n, s2 + r * n, n, rate, adam);
        }
      }
      p.mutable_grad().reset();
      continue;
    }
    torch::Tensor lr_v;
    if (!uniform_lr) {
      std::vector<std::int64_t> view(static_cast<std::size_t>(p.dim()), 1);
      view[0] = p.size(0);
      lr_v = lr.view(view);
    }
    if (spec_.type == "sgd") {
      if (wd != 0) g = g.add(p, wd);
      if (spec_.momentum > 0) {
        torch::Tensor& buf = state1_[i];
        if (step_ == 1) {
          buf.copy_(g);
        } else {
          buf.mul_(spec_.momentum).add_(g);
        }
        g = spec_.nesterov ? g.add(buf, spec_.momentum) : buf;
      }
      if (uniform_lr) {
        p.add_(g, -*uniform_lr);
      } else {
        p.sub_(lr_v * g);
      }
    } else {
      if (spec_.type == "adam" && wd != 0) g = g.add(p, wd);
      if (spec_.type == "adamw" && wd != 0) {
        if (uniform_lr) {
          p.mul_(1.0 - *uniform_lr * wd);
        } else {
          p.sub_(lr_v * wd * p);
        }
      }
      torch::Tensor& m = state1_[i];
      torch::Tensor& v = state2_[i];
      m.mul_(b1).add_(g, 1.0 - b1);
      v.mul_(b2).addcmul_(g, g, 1.0 - b2);
      torch::Tensor denom = v.sqrt().div_(std::sqrt(bc2)).add_(spec_.eps);
      if (uniform_lr) {
        p.addcdiv_(m, denom, -*uniform_lr / bc1);
      } else {
        p.sub_((lr_v / bc1) * m / denom);
      }
    }
    p.mutable_grad().reset();
  }
}

double LearningRate(const OptimizerSpec& o, std::int64_t epoch /*0-based*/, std::int64_t epochs) {
  const ScheduleSpec& s = o.schedule;
  if (s.warmup_epochs > 0 && epoch < s.warmup_epochs) {
    return o.lr * static_cast<double>(epoch + 1) / static_cast<double>(s.warmup_epochs);
  }
  if (s.type == "step") {
    return o.lr * std::pow(s.gamma, static_cast<double>((epoch - s.warmup_epochs) / s.step_size));
  }
  if (s.type == "cosine") {
    const double span = static_cast<double>(std::max<std::int64_t>(1, epochs - s.warmup_epochs));
    const double t = static_cast<double>(epoch - s.warmup_epochs) / span;
    return s.min_lr + 0.5 * (o.lr - s.min_lr) * (1.0 + std::cos(M_PI * t));
  }
  return o.lr;
}

}  // namespace trainq::trainer
