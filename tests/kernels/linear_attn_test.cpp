// The linear-attention ops on the CPU against ref/: causal_conv1d and gated_delta_rule over varlen steps
// (fresh and continuing sequences, a padding sequence with no slot, strided q/k views, GQA grouping, odd
// sizes, f32/bf16 weights), splitting a sequence over two steps equals one step (output and final state:
// the state slot carries the recurrence), rms_norm_gated and sigmoid_mul on strided rows; argument errors.
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_linear_attn.h"

namespace bunsen::kernels::test {
namespace {

// Host metadata of one step: sequences of `lens` tokens starting at `starts` (positions), slots `slots`.
struct Meta {
  std::vector<int32_t> seq_starts, slots, positions;
  StateMeta view() {
    const auto n_seqs = static_cast<int64_t>(slots.size());
    return {Tensor::view(seq_starts.data(), DType::kI32, {n_seqs + 1}), Tensor::view(slots.data(), DType::kI32, {n_seqs}),
            Tensor::view(positions.data(), DType::kI32, {static_cast<int64_t>(positions.size())})};
  }
  int64_t n_tokens() const { return static_cast<int64_t>(positions.size()); }
};

Meta make_meta(const std::vector<int>& lens, const std::vector<int>& first_pos, const std::vector<int>& slots) {
  Meta m;
  m.seq_starts.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int i = 0; i < lens[s]; ++i) m.positions.push_back(first_pos[s] + i);
    m.seq_starts.push_back(static_cast<int32_t>(m.positions.size()));
    m.slots.push_back(slots[s]);
  }
  return m;
}

// Sequences: a continuing one (slot 2), a fresh one whose slot holds garbage (slot 0), a padding row (no
// slot), a single-token decode (slot 1).
const std::vector<int> kLens = {7, 33, 1, 1}, kFirst = {5, 0, 0, 12}, kSlots = {2, 0, -1, 1};

TEST(LinearAttnCpu, CausalConvMatchesReference) {
  Context ctx;
  std::mt19937 rng(901);
  for (DType wt : {DType::kF32, DType::kBF16})
    for (int64_t kernel : {2, 4}) {
      Meta m = make_meta(kLens, kFirst, kSlots);
      const int64_t n = m.n_tokens(), c = 37;
      OwnedTensor x = random_tensor(DType::kF32, {n, c + 5}, rng);  // strided rows
      const Tensor xs = x.tensor.slice(1, 2, 2 + c);
      OwnedTensor w = random_tensor(wt, {c, kernel}, rng);
      OwnedTensor st = random_tensor(DType::kF32, {3, c, kernel - 1}, rng);
      OwnedTensor st_ref = clone(st.tensor);
      OwnedTensor got = OwnedTensor::make(DType::kF32, {n, c}), want = OwnedTensor::make(DType::kF32, {n, c});
      causal_conv1d(ctx, got.tensor, xs, w.tensor, st.tensor, m.view());
      ref::causal_conv1d(want.tensor, xs, w.tensor, st_ref.tensor, m.view());
      const std::string what = std::string(dtype_name(wt)) + " kernel " + std::to_string(kernel);
      expect_close(got.tensor, want.tensor, 1e-5f, "conv out " + what);
      expect_close(st.tensor, st_ref.tensor, 0.0f, "conv state " + what);
      const int32_t pad = m.seq_starts[2];
      for (int64_t j = 0; j < c; ++j) EXPECT_EQ(got.tensor.ptr<float>()[pad * c + j], 0.0f) << "padding row";
    }
}

TEST(LinearAttnCpu, CausalConvOverTwoStepsEqualsOneStep) {
  Context ctx;
  std::mt19937 rng(902);
  const int64_t c = 19, kernel = 4, len = 23, split = 9;
  OwnedTensor x = random_tensor(DType::kF32, {len, c}, rng), w = random_tensor(DType::kF32, {c, kernel}, rng);
  OwnedTensor s1 = OwnedTensor::make(DType::kF32, {1, c, kernel - 1}), s2 = OwnedTensor::make(DType::kF32, {1, c, kernel - 1});
  OwnedTensor one = OwnedTensor::make(DType::kF32, {len, c}), two = OwnedTensor::make(DType::kF32, {len, c});
  Meta all = make_meta({static_cast<int>(len)}, {0}, {0});
  causal_conv1d(ctx, one.tensor, x.tensor, w.tensor, s1.tensor, all.view());
  Meta a = make_meta({static_cast<int>(split)}, {0}, {0}), b = make_meta({static_cast<int>(len - split)}, {static_cast<int>(split)}, {0});
  causal_conv1d(ctx, two.tensor.slice(0, 0, split), x.tensor.slice(0, 0, split), w.tensor, s2.tensor, a.view());
  causal_conv1d(ctx, two.tensor.slice(0, split, len), x.tensor.slice(0, split, len), w.tensor, s2.tensor, b.view());
  expect_close(two.tensor, one.tensor, 0.0f, "split conv out");
  expect_close(s2.tensor, s1.tensor, 0.0f, "split conv state");
}

struct DeltaCase {
  OwnedTensor packed;  // [n, 2 * n_k * dk + n_v * dv]: q | k | v, like the model's conv output
  OwnedTensor a, b, a_log, dt_bias;
  DeltaRuleInputs in;
};

DeltaCase delta_case(int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, std::mt19937& rng) {
  DeltaCase d;
  const int64_t kd = n_k * dk, width = 2 * kd + n_v * dv;
  d.packed = random_tensor(DType::kF32, {n, width}, rng);
  d.a = random_tensor(DType::kF32, {n, n_v}, rng, -3.0f, 3.0f);
  d.b = random_tensor(DType::kF32, {n, n_v}, rng, -3.0f, 3.0f);
  d.a_log = random_tensor(DType::kBF16, {n_v}, rng, -2.0f, 1.0f);
  d.dt_bias = random_tensor(DType::kF32, {n_v}, rng);
  auto heads = [&](int64_t lo, int64_t h, int64_t dim) {
    Tensor t = d.packed.tensor.slice(1, lo, lo + h * dim);
    t.ndim = 3;
    t.shape[1] = h;
    t.shape[2] = dim;
    t.strides[1] = dim;
    t.strides[2] = 1;
    return t;
  };
  d.in = {heads(0, n_k, dk), heads(kd, n_k, dk), heads(2 * kd, n_v, dv), d.a.tensor, d.b.tensor, d.a_log.tensor,
          d.dt_bias.tensor};
  return d;
}

TEST(LinearAttnCpu, GatedDeltaRuleMatchesReference) {
  Context ctx;
  std::mt19937 rng(903);
  for (auto [n_k, n_v, dk, dv] : {std::tuple{2, 4, 16, 16}, {1, 3, 8, 13}, {3, 3, 33, 5}}) {
    Meta m = make_meta(kLens, kFirst, kSlots);
    const int64_t n = m.n_tokens();
    DeltaCase d = delta_case(n, n_k, n_v, dk, dv, rng);
    OwnedTensor st = random_tensor(DType::kF32, {3, n_v, dk, dv}, rng, -0.5f, 0.5f), st_ref = clone(st.tensor);
    OwnedTensor got = OwnedTensor::make(DType::kF32, {n, n_v, dv}), want = OwnedTensor::make(DType::kF32, {n, n_v, dv});
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    gated_delta_rule(ctx, got.tensor, d.in, st.tensor, m.view(), scale);
    ref::gated_delta_rule(want.tensor, d.in, st_ref.tensor, m.view(), scale);
    const std::string what = strfmt("n_k %d n_v %d dk %d dv %d", n_k, n_v, dk, dv);
    expect_close(got.tensor, want.tensor, 1e-5f, "delta out " + what);
    expect_close(st.tensor, st_ref.tensor, 1e-5f, "delta state " + what);
  }
}

TEST(LinearAttnCpu, GatedDeltaRuleOverTwoStepsEqualsOneStep) {
  Context ctx;
  std::mt19937 rng(904);
  const int64_t n = 30, split = 13, n_k = 2, n_v = 4, dk = 8, dv = 12;
  DeltaCase d = delta_case(n, n_k, n_v, dk, dv, rng);
  OwnedTensor s1 = OwnedTensor::make(DType::kF32, {1, n_v, dk, dv}), s2 = OwnedTensor::make(DType::kF32, {1, n_v, dk, dv});
  OwnedTensor one = OwnedTensor::make(DType::kF32, {n, n_v, dv}), two = OwnedTensor::make(DType::kF32, {n, n_v, dv});
  Meta all = make_meta({static_cast<int>(n)}, {0}, {0});
  gated_delta_rule(ctx, one.tensor, d.in, s1.tensor, all.view(), 0.3f);
  auto part = [&](int64_t lo, int64_t hi) {
    DeltaRuleInputs in = d.in;
    for (Tensor* t : {&in.q, &in.k, &in.v, &in.a, &in.b}) *t = t->slice(0, lo, hi);
    Meta m = make_meta({static_cast<int>(hi - lo)}, {static_cast<int>(lo)}, {0});
    gated_delta_rule(ctx, two.tensor.slice(0, lo, hi), in, s2.tensor, m.view(), 0.3f);
  };
  part(0, split);
  part(split, n);
  expect_close(two.tensor, one.tensor, 0.0f, "split delta out");
  expect_close(s2.tensor, s1.tensor, 0.0f, "split delta state");
}

TEST(LinearAttnCpu, GatedNormAndSigmoidGateMatchReference) {
  Context ctx;
  std::mt19937 rng(905);
  for (int64_t d : {1, 16, 37}) {
    OwnedTensor x = random_tensor(DType::kF32, {5, d + 3}, rng), z = random_tensor(DType::kF32, {5, d}, rng);
    OwnedTensor w = random_tensor(DType::kBF16, {d}, rng);
    const Tensor xs = x.tensor.slice(1, 3, 3 + d);
    OwnedTensor got = OwnedTensor::make(DType::kF32, {5, d}), want = OwnedTensor::make(DType::kF32, {5, d});
    rms_norm_gated(ctx, got.tensor, xs, z.tensor, w.tensor, 1e-6f);
    ref::rms_norm_gated(want.tensor, xs, z.tensor, w.tensor, 1e-6f);
    expect_close(got.tensor, want.tensor, 1e-5f, "rms_norm_gated d " + std::to_string(d));
    sigmoid_mul(ctx, got.tensor, xs, z.tensor);
    ref::sigmoid_mul(want.tensor, xs, z.tensor);
    expect_close(got.tensor, want.tensor, 1e-6f, "sigmoid_mul d " + std::to_string(d));
    // out = x * sigmoid(0) = x / 2: a value the formula fixes independently of both implementations.
    OwnedTensor zero = OwnedTensor::make(DType::kF32, {5, d});
    sigmoid_mul(ctx, got.tensor, xs, zero.tensor);
    const std::vector<float> gx = values(got.tensor), xx = values(xs);
    for (size_t i = 0; i < gx.size(); ++i) EXPECT_FLOAT_EQ(gx[i], 0.5f * xx[i]);
    // One gate per row, broadcast over the row.
    OwnedTensor g1 = random_tensor(DType::kF32, {5, 1}, rng);
    sigmoid_mul(ctx, got.tensor, xs, g1.tensor);
    ref::sigmoid_mul(want.tensor, xs, g1.tensor);
    expect_close(got.tensor, want.tensor, 1e-6f, "sigmoid_mul broadcast d " + std::to_string(d));
    const std::vector<float> gb = values(got.tensor);
    for (int64_t r = 0; r < 5; ++r)
      EXPECT_FLOAT_EQ(gb[static_cast<size_t>(r * d)], xx[static_cast<size_t>(r * d)] / (1.0f + std::exp(-g1.tensor.ptr<float>()[r])));
  }
}

TEST(LinearAttnCpu, ArgumentErrors) {
  Context ctx;
  std::mt19937 rng(906);
  Meta m = make_meta({3}, {0}, {0});
  OwnedTensor x = random_tensor(DType::kF32, {3, 8}, rng), w = random_tensor(DType::kF32, {8, 4}, rng);
  OwnedTensor out = OwnedTensor::make(DType::kF32, {3, 8});
  OwnedTensor bad_state = OwnedTensor::make(DType::kF32, {1, 8, 4});  // kernel - 1 = 3 expected
  EXPECT_THROW(causal_conv1d(ctx, out.tensor, x.tensor, w.tensor, bad_state.tensor, m.view()), Error);
  OwnedTensor st = OwnedTensor::make(DType::kF32, {1, 8, 3});
  Meta far = make_meta({3}, {0}, {4});  // slot 4 of a 1-slot state
  EXPECT_THROW(causal_conv1d(ctx, out.tensor, x.tensor, w.tensor, st.tensor, far.view()), Error);
  Meta short_meta = make_meta({2}, {0}, {0});  // ranges do not cover the 3 tokens
  short_meta.positions.push_back(2);
  EXPECT_THROW(causal_conv1d(ctx, out.tensor, x.tensor, w.tensor, st.tensor, short_meta.view()), Error);
  EXPECT_THROW(causal_conv1d(ctx, x.tensor, x.tensor, w.tensor, st.tensor, m.view()), Error);  // aliasing
  DeltaCase d = delta_case(3, 2, 3, 4, 4, rng);  // 3 v heads are not a multiple of 2 k heads
  OwnedTensor dst = OwnedTensor::make(DType::kF32, {1, 3, 4, 4}), dout = OwnedTensor::make(DType::kF32, {3, 3, 4});
  EXPECT_THROW(gated_delta_rule(ctx, dout.tensor, d.in, dst.tensor, m.view(), 1.0f), Error);
}

}  // namespace
}  // namespace bunsen::kernels::test
