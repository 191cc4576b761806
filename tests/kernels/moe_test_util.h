// Helpers for the MoE op tests (CPU and CUDA): a random expert projection stored stacked [n_experts, rows,
// cols] (float, or MLX affine codes + scales/biases), its host address table (ExpertWeights), random
// routing inputs, and routing ids with repeated and unused experts. Not a test by itself. Invariant:
// tables point into the fixture's own storage, so a fixture must outlive the ExpertWeights it hands out.
#pragma once
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace bunsen::kernels::test {

struct ExpertProj {
  OwnedTensor w;               // [E, rows, cols] float, or [E, rows, cols * bits / 32] u32 codes
  OwnedTensor scales, biases;  // [E, rows, cols / group] (quantized only)
  OwnedTensor ptrs, scale_ptrs, bias_ptrs;  // [E] i64 host addresses
  ExpertWeights view;

  // The table of `t` ([E, ...] contiguous) at base address `base` (host or device copy of t).
  static OwnedTensor table(const Tensor& t, const void* base) {
    const int64_t n = t.shape[0], per = t.nbytes() / static_cast<size_t>(n);
    OwnedTensor out = OwnedTensor::make(DType::kI64, {n});
    for (int64_t e = 0; e < n; ++e)
      out.tensor.ptr<int64_t>()[e] = static_cast<int64_t>(reinterpret_cast<intptr_t>(base)) + e * per;
    return out;
  }
};

// bits 0: float weights of dtype `dt` in [-s, s) with s = 1/sqrt(cols); else random codes, scales of dtype
// `dt` in [0, 2/(2^bits sqrt(cols))) and biases in [-1/sqrt(cols), 0).
inline ExpertProj make_expert_proj(int64_t n_experts, int64_t rows, int64_t cols, DType dt, int bits, int group,
                                   std::mt19937& rng) {
  ExpertProj p;
  const float s = 1.0f / std::sqrt(static_cast<float>(cols));
  if (bits == 0) {
    p.w = random_tensor(dt, {n_experts, rows, cols}, rng, -s, s);
  } else {
    p.w = OwnedTensor::make(DType::kU32, {n_experts, rows, cols * bits / 32});
    for (int64_t i = 0; i < p.w.tensor.numel(); ++i) p.w.tensor.ptr<uint32_t>()[i] = static_cast<uint32_t>(rng());
    p.scales = random_tensor(dt, {n_experts, rows, cols / group}, rng, 0.0f, 2.0f * s / float(1 << bits));
    p.biases = random_tensor(dt, {n_experts, rows, cols / group}, rng, -s, 0.0f);
    p.scale_ptrs = ExpertProj::table(p.scales.tensor, p.scales.tensor.data);
    p.bias_ptrs = ExpertProj::table(p.biases.tensor, p.biases.tensor.data);
  }
  p.ptrs = ExpertProj::table(p.w.tensor, p.w.tensor.data);
  p.view.ptrs = p.ptrs.tensor;
  p.view.scale_ptrs = bits ? p.scale_ptrs.tensor : Tensor{};
  p.view.bias_ptrs = bits ? p.bias_ptrs.tensor : Tensor{};
  p.view.dtype = dt;
  p.view.rows = rows;
  p.view.cols = cols;
  p.view.bits = bits;
  p.view.group_size = bits ? group : 0;
  return p;
}

struct ExpertSet {
  ExpertProj gate, up, down;
  MoeExperts view() const { return {gate.view, up.view, down.view, act}; }
  MoeActivation act = MoeActivation::kSilu;
};

inline ExpertSet make_experts(int64_t n_experts, int64_t d, int64_t f, DType dt, int bits, int group,
                              std::mt19937& rng, MoeActivation act = MoeActivation::kSilu) {
  ExpertSet s;
  s.gate = make_expert_proj(n_experts, f, d, dt, bits, group, rng);
  s.up = make_expert_proj(n_experts, f, d, dt, bits, group, rng);
  s.down = make_expert_proj(n_experts, d, f, dt, bits, group, rng);
  s.act = act;
  return s;
}

// ids [n, k] i32: distinct experts per token drawn from the first `used` experts (so the others are chosen
// by no token and, with n * k > used, several tokens share an expert); weights [n, k] f32 in [0.1, 1).
struct Routing {
  OwnedTensor ids, weights;
};

inline Routing make_routing(int64_t n, int64_t k, int64_t used, std::mt19937& rng) {
  Routing r;
  r.ids = OwnedTensor::make(DType::kI32, {n, k});
  r.weights = random_tensor(DType::kF32, {n, k}, rng, 0.1f, 1.0f);
  std::vector<int32_t> pool(static_cast<size_t>(used));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < used; ++e) pool[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < k; ++j) r.ids.tensor.ptr<int32_t>()[t * k + j] = pool[static_cast<size_t>(j)];
  }
  return r;
}

}  // namespace bunsen::kernels::test
