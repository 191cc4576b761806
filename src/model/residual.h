// The residual stream of a decoder whose residual add + RMSNorm may run inside the projection that reads the
// normalised activations (kernels::AddRmsNorm as a `pre`, the GEMV prologue on CUDA): the forwards of the
// llama-like, Qwen3-MoE and Qwen3.5 families (add_norm) and Gemma 4's sandwich norms (add_post_norm). Not a
// norm kernel and not a layer.
// Invariant: with in_proj, x alternates between two buffers (the prologue writes the new x while other blocks
// still read the old one); add_norm's pre is consumed before the next add_norm call.
#pragma once
#include <utility>

#include "kernels/ops.h"

namespace bunsen::model {

class Residual {
 public:
  // x, alt: [n, d] f32 (alt unused unless in_proj); in_proj: model::norms_in_projections for this step.
  Residual(Tensor x, Tensor alt, bool in_proj, float eps, float y_scale = 1.0f, float w_offset = 0.0f)
      : x_(x), alt_(alt), in_proj_(in_proj), eps_(eps), y_scale_(y_scale), w_offset_(w_offset) {}

  // The stream's current buffer.
  const Tensor& x() const { return x_; }

  // x += y * y_scale, then h = rms_norm(x) * (w + w_offset). Without in_proj it runs now (add_rms_norm in
  // place) and returns null; with it, it returns the pre that the projection reading h must take (valid until
  // the next call) and x becomes the other buffer, which that projection writes.
  const kernels::AddRmsNorm* add_norm(kernels::Context& ctx, Tensor h, Tensor y, Tensor w) {
    if (!in_proj_) {
      kernels::add_rms_norm(ctx, h, x_, y, w, eps_, y_scale_, w_offset_);
      return nullptr;
    }
    pre_ = {x_, y, alt_, w, eps_, y_scale_, w_offset_};
    std::swap(x_, alt_);
    return &pre_;
  }

  // h = rms_norm(x) * (w + w_offset): the first layer's input norm. With in_proj, the pre that adds nothing
  // (y = x scaled by 0: x_in + 0 * x_in is x_in exactly for finite x, and the norm then has rms_norm's bits),
  // so the first projection computes the norm in its prologue too; x becomes the other buffer, as add_norm.
  const kernels::AddRmsNorm* norm(kernels::Context& ctx, Tensor h, Tensor w) {
    if (!in_proj_) {
      kernels::rms_norm(ctx, h, x_, w, eps_, w_offset_);
      return nullptr;
    }
    pre_ = {x_, x_, alt_, w, eps_, 0.0f, w_offset_};
    std::swap(x_, alt_);
    return &pre_;
  }

  // The post-norm form (y_scale must be 1): x = (x + rms_norm(y) * (y_w + w_offset)) * x_scale, then h =
  // rms_norm(x) * (w + w_offset); y is unspecified afterwards. Without in_proj kernels::post_norm_residual
  // runs now (null); with it, as add_norm.
  const kernels::AddRmsNorm* add_post_norm(kernels::Context& ctx, Tensor h, Tensor y, Tensor y_w, Tensor w,
                                           float x_scale) {
    if (!in_proj_) {
      kernels::post_norm_residual(
          ctx,
          {.x = x_, .y = y, .w_post = y_w, .out = h, .w_next = w, .x_scale = x_scale, .w_offset = w_offset_},
          eps_);
      return nullptr;
    }
    pre_ = {x_, y, alt_, w, eps_, 1.0f, w_offset_, y_w, x_scale};
    std::swap(x_, alt_);
    return &pre_;
  }

 private:
  Tensor x_, alt_;
  bool in_proj_;
  float eps_, y_scale_, w_offset_;
  kernels::AddRmsNorm pre_;
};

}  // namespace bunsen::model
