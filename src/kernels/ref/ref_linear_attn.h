// Naive references of the linear-attention ops of ops.h (causal_conv1d, gated_delta_rule, rms_norm_gated,
// sigmoid_mul): one element at a time, single-threaded, straight from the formulas in ops.h. They are
// the truth the CPU fast path and the CUDA kernels are tested against. Not validating (dispatch did).
#pragma once
#include "kernels/ops.h"

namespace bunsen::kernels::ref {

void causal_conv1d(Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta);
void gated_delta_rule(Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta, float q_scale);
void rms_norm_gated(Tensor out, Tensor x, Tensor z, Tensor w, float eps);
void sigmoid_mul(Tensor out, Tensor x, Tensor gate);

}  // namespace bunsen::kernels::ref
