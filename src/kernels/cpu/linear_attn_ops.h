// Fast CPU implementations of the linear-attention ops of ops.h (causal_conv1d, gated_delta_rule,
// rms_norm_gated, sigmoid_mul), threaded over channels, (sequence, head) pairs or rows. Not validating
// (dispatch_linear_attn.cpp checks first). Invariants: same math as ref/ up to f32 summation order;
// the per-(sequence, head) recurrence (or chunk sequence) runs in token order on one thread.
#pragma once
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace bunsen::kernels::cpu {

void causal_conv1d(ThreadPool& pool, Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta);
// A sequence's run of >= chunk_min tokens takes the chunked form (kDeltaRuleChunk tokens at a time),
// shorter runs the recurrent one (chunk_min 1: all chunked; above n_tokens: all recurrent).
void gated_delta_rule(ThreadPool& pool, Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta,
                      float q_scale, int64_t chunk_min = kDeltaRuleChunkMinTokens);
void rms_norm_gated(ThreadPool& pool, Tensor out, Tensor x, Tensor z, Tensor w, float eps);
void sigmoid_mul(ThreadPool& pool, Tensor out, Tensor x, Tensor gate);

}  // namespace bunsen::kernels::cpu
