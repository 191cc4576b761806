// The linear-attention ops on the CPU against ref/: causal_conv1d and gated_delta_rule over varlen steps
// (fresh and continuing sequences, a padding sequence with no slot, strided q/k views, GQA grouping, odd
// sizes, f32/bf16 weights), splitting a sequence over two steps equals one step (output and final state:
// the state slot carries the recurrence), the chunked form against the recurrent reference at chunk
// boundaries (1, 63, 64, 65, 200, 513 tokens), GQA ratios, mixed batches and the 128 x 128 head size,
// rms_norm_gated and sigmoid_mul on strided rows; argument errors.
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

// Gate pre-activations a, b uniform in [a_lo, a_lo + 6), [b_lo, b_lo + 6).
DeltaCase delta_case(int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, std::mt19937& rng,
                     float a_lo = -3.0f, float b_lo = -3.0f) {
  DeltaCase d;
  const int64_t kd = n_k * dk, width = 2 * kd + n_v * dv;
  d.packed = random_tensor(DType::kF32, {n, width}, rng);
  d.a = random_tensor(DType::kF32, {n, n_v}, rng, a_lo, a_lo + 6.0f);
  d.b = random_tensor(DType::kF32, {n, n_v}, rng, b_lo, b_lo + 6.0f);
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

// Forces one form of gated_delta_rule for a scope.
struct FormScope {
  explicit FormScope(DeltaRuleForm f) { set_delta_rule_form_for_testing(f); }
  ~FormScope() { set_delta_rule_form_for_testing(DeltaRuleForm::kAuto); }
};

// Runs gated_delta_rule on the CPU in `form` and the recurrent reference on one step; compares the output
// and every slot's final state to 1e-4 of the reference's largest magnitude.
void check_chunked(DeltaRuleForm form, Meta m, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, std::mt19937& rng,
                   const std::string& what, float a_lo = -3.0f, float b_lo = -3.0f) {
  Context ctx;
  const int64_t n = m.n_tokens();
  DeltaCase d = delta_case(n, n_k, n_v, dk, dv, rng, a_lo, b_lo);
  OwnedTensor st = random_tensor(DType::kF32, {4, n_v, dk, dv}, rng, -0.5f, 0.5f), st_ref = clone(st.tensor);
  OwnedTensor got = random_tensor(DType::kF32, {n, n_v, dv}, rng), want = OwnedTensor::make(DType::kF32, {n, n_v, dv});
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  {
    FormScope f(form);
    gated_delta_rule(ctx, got.tensor, d.in, st.tensor, m.view(), scale);
  }
  ref::gated_delta_rule(want.tensor, d.in, st_ref.tensor, m.view(), scale);
  const std::string full = what + strfmt(" n_k %lld n_v %lld dk %lld dv %lld", (long long)n_k, (long long)n_v,
                                         (long long)dk, (long long)dv);
  expect_close(got.tensor, want.tensor, 1e-4f, "chunked delta out " + full);
  expect_close(st.tensor, st_ref.tensor, 1e-4f, "chunked delta state " + full);
}

TEST(LinearAttnCpu, ChunkedDeltaRuleMatchesRecurrentAtChunkBoundaries) {
  std::mt19937 rng(907);
  for (int len : {1, 63, 64, 65, 200, 513})
    for (auto [n_k, n_v, dk, dv] : {std::tuple{1, 2, 16, 24}, {2, 6, 32, 8}, {3, 3, 13, 7}}) {
      // Fresh at position 0 (its slot holds garbage) and continuing from a slot's state.
      check_chunked(DeltaRuleForm::kChunked, make_meta({len}, {0}, {1}), n_k, n_v, dk, dv, rng,
                    strfmt("fresh len %d", len));
      check_chunked(DeltaRuleForm::kChunked, make_meta({len}, {37}, {3}), n_k, n_v, dk, dv, rng,
                    strfmt("continuing len %d", len));
    }
}

TEST(LinearAttnCpu, ChunkedDeltaRuleWithSlowDecayAndLargeBeta) {
  // a in [-12, -6): decay within ~1e-3 of 1, so whole chunks stay in the state; b in [1, 7): beta near 1,
  // the regime where the forward substitution through I + A does the most work.
  std::mt19937 rng(911);
  for (int len : {64, 200, 513})
    for (auto [n_k, n_v, dk, dv] : {std::tuple{1, 2, 8, 8}, {2, 4, 64, 32}})
      check_chunked(DeltaRuleForm::kChunked, make_meta({len}, {5}, {2}), n_k, n_v, dk, dv, rng,
                    strfmt("slow decay len %d", len), -12.0f, 1.0f);
}

TEST(LinearAttnCpu, ChunkedDeltaRuleAtQwen35HeadSize) {
  std::mt19937 rng(908);
  for (int len : {65, 200})
    check_chunked(DeltaRuleForm::kChunked, make_meta({len}, {0}, {0}), 2, 4, 128, 128, rng, strfmt("len %d", len));
}

TEST(LinearAttnCpu, MixedBatchTakesBothFormsPerSequence) {
  std::mt19937 rng(909);
  // A long fresh prompt, a long continuing chunk, a long padding row (slot -1), a short continuing run, a
  // decode row and an empty sequence: in kAuto the long runs take the chunked form, the rest the recurrent.
  const std::vector<int> lens = {130, 65, 70, 9, 1, 0}, first = {0, 200, 0, 17, 40, 3}, slots = {0, 2, -1, 3, 1, 1};
  for (DeltaRuleForm form : {DeltaRuleForm::kAuto, DeltaRuleForm::kChunked, DeltaRuleForm::kRecurrent}) {
    Meta m = make_meta(lens, first, slots);
    check_chunked(form, m, 2, 4, 16, 12, rng, strfmt("mixed form %d", static_cast<int>(form)));
  }
  // The padding row's output is exactly zero in the chunked form.
  Context ctx;
  Meta m = make_meta({70}, {0}, {-1});
  DeltaCase d = delta_case(70, 1, 2, 8, 8, rng);
  OwnedTensor st = random_tensor(DType::kF32, {1, 2, 8, 8}, rng), st0 = clone(st.tensor);
  OwnedTensor got = random_tensor(DType::kF32, {70, 2, 8}, rng);
  gated_delta_rule(ctx, got.tensor, d.in, st.tensor, m.view(), 1.0f);
  for (float v : values(got.tensor)) ASSERT_EQ(v, 0.0f) << "padding sequence output";
  expect_close(st.tensor, st0.tensor, 0.0f, "padding sequence leaves the state alone");
}

TEST(LinearAttnCpu, ChunkedPrefillThenRecurrentDecodeEqualsOneStep) {
  // Prefill of 150 tokens (chunked in kAuto) then 3 decode steps equals the reference over all 153 at once.
  Context ctx;
  std::mt19937 rng(910);
  const int64_t n = 153, pre = 150, n_k = 2, n_v = 4, dk = 16, dv = 16;
  DeltaCase d = delta_case(n, n_k, n_v, dk, dv, rng);
  OwnedTensor s1 = random_tensor(DType::kF32, {1, n_v, dk, dv}, rng), s2 = clone(s1.tensor);
  OwnedTensor one = OwnedTensor::make(DType::kF32, {n, n_v, dv}), two = OwnedTensor::make(DType::kF32, {n, n_v, dv});
  Meta all = make_meta({static_cast<int>(n)}, {0}, {0});
  ref::gated_delta_rule(one.tensor, d.in, s1.tensor, all.view(), 0.25f);
  auto part = [&](int64_t lo, int64_t hi) {
    DeltaRuleInputs in = d.in;
    for (Tensor* t : {&in.q, &in.k, &in.v, &in.a, &in.b}) *t = t->slice(0, lo, hi);
    Meta m = make_meta({static_cast<int>(hi - lo)}, {static_cast<int>(lo)}, {0});
    gated_delta_rule(ctx, two.tensor.slice(0, lo, hi), in, s2.tensor, m.view(), 0.25f);
  };
  part(0, pre);
  for (int64_t t = pre; t < n; ++t) part(t, t + 1);
  expect_close(two.tensor, one.tensor, 1e-4f, "chunked prefill + decode out");
  expect_close(s2.tensor, s1.tensor, 1e-4f, "chunked prefill + decode state");
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
