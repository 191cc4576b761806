// The linear-attention ops on CUDA against ref/ (f32 and bf16 activations, f32 states): causal_conv1d and
// gated_delta_rule over varlen steps (continuing, fresh-with-garbage-state, padding and decode sequences,
// strided q/k/v views of one packed conv output, GQA grouping, odd dims, the real 128 x 128 head size
// whose state needs > 48 KiB of shared memory), the chunked kernel (forced and by run length) at chunk
// boundaries and in mixed steps, and rms_norm_gated / sigmoid_mul on strided rows. Skips without a GPU.
#include <vector>

#include "cuda_test_util.h"
#include "kernels/ref/ref_linear_attn.h"

namespace bunsen::kernels::test {
namespace {

struct Meta {
  std::vector<int32_t> seq_starts, slots, positions;
  OwnedTensor host(const std::vector<int32_t>& v) const {
    OwnedTensor t = OwnedTensor::make(DType::kI32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.tensor.ptr<int32_t>());
    return t;
  }
  StateMeta host_view() {
    return {Tensor::view(seq_starts.data(), DType::kI32, {static_cast<int64_t>(seq_starts.size())}),
            Tensor::view(slots.data(), DType::kI32, {static_cast<int64_t>(slots.size())}),
            Tensor::view(positions.data(), DType::kI32, {static_cast<int64_t>(positions.size())})};
  }
  int64_t n_tokens() const { return static_cast<int64_t>(positions.size()); }
};

struct DevMeta {
  DeviceTensor starts, slots, positions;
  StateMeta view() const { return {starts.tensor, slots.tensor, positions.tensor}; }
};

Meta make_meta(const std::vector<int>& lens, const std::vector<int>& first, const std::vector<int>& slots) {
  Meta m;
  m.seq_starts.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int i = 0; i < lens[s]; ++i) m.positions.push_back(first[s] + i);
    m.seq_starts.push_back(static_cast<int32_t>(m.positions.size()));
    m.slots.push_back(slots[s]);
  }
  return m;
}

DevMeta upload(const Meta& m) {
  return {DeviceTensor::upload(m.host(m.seq_starts).tensor), DeviceTensor::upload(m.host(m.slots).tensor),
          DeviceTensor::upload(m.host(m.positions).tensor)};
}

// [n, heads * dim] columns [lo, lo + heads * dim) of a packed [n, width] tensor as [n, heads, dim].
Tensor heads_view(const Tensor& packed, int64_t lo, int64_t heads, int64_t dim) {
  Tensor t = packed.slice(1, lo, lo + heads * dim);
  t.ndim = 3;
  t.shape[1] = heads;
  t.shape[2] = dim;
  t.strides[1] = dim;
  t.strides[2] = 1;
  return t;
}

const std::vector<int> kLens = {7, 33, 1, 1, 70}, kFirst = {5, 0, 0, 12, 0}, kSlots = {2, 0, -1, 1, 3};

TEST_F(CudaTest, CausalConvMatchesReference) {
  std::mt19937 rng(951);
  for (DType at : kActDtypes)
    for (int64_t kernel : {2, 4}) {
      Meta m = make_meta(kLens, kFirst, kSlots);
      const int64_t n = m.n_tokens(), c = 133;
      HostPair x = random_pair(at, {n, c}, rng);
      OwnedTensor w = random_tensor(DType::kBF16, {c, kernel}, rng);
      OwnedTensor st = random_tensor(DType::kF32, {4, c, kernel - 1}, rng), st_ref = clone(st.tensor);
      OwnedTensor want = OwnedTensor::make(DType::kF32, {n, c});
      ref::causal_conv1d(want.tensor, x.f32.tensor, w.tensor, st_ref.tensor, m.host_view());
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor), wd = DeviceTensor::upload(w.tensor);
      DeviceTensor sd = DeviceTensor::upload(st.tensor), od = DeviceTensor::upload(random_tensor(at, {n, c}, rng).tensor);
      const DevMeta dm = upload(m);
      causal_conv1d(ctx_, od.tensor, xd.tensor, wd.tensor, sd.tensor, dm.view());
      const std::string what = strfmt("%s kernel %lld", dtype_name(at), (long long)kernel);
      expect_close(od.download().tensor, want.tensor, tolerance(at), "conv out " + what);
      expect_close(sd.download().tensor, st_ref.tensor, 1e-6f, "conv state " + what);
    }
}

struct DeltaHost {
  HostPair packed, a, b;
  OwnedTensor a_log, dt_bias;
  int64_t n_k, n_v, dk, dv;
  DeltaRuleInputs view(const Tensor& p, const Tensor& a_, const Tensor& b_, const Tensor& al, const Tensor& dt) const {
    return {heads_view(p, 0, n_k, dk), heads_view(p, n_k * dk, n_k, dk), heads_view(p, 2 * n_k * dk, n_v, dv), a_, b_,
            al, dt};
  }
};

void check_delta(Context& ctx, DType at, Meta m, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, std::mt19937& rng) {
  const int64_t n = m.n_tokens(), slots = 4;
  DeltaHost h{random_pair(at, {n, 2 * n_k * dk + n_v * dv}, rng), random_pair(at, {n, n_v}, rng, -3.0f, 3.0f),
              random_pair(at, {n, n_v}, rng, -3.0f, 3.0f), random_tensor(DType::kBF16, {n_v}, rng, -2.0f, 1.0f),
              random_tensor(DType::kF32, {n_v}, rng), n_k, n_v, dk, dv};
  OwnedTensor st = random_tensor(DType::kF32, {slots, n_v, dk, dv}, rng, -0.5f, 0.5f), st_ref = clone(st.tensor);
  OwnedTensor want = OwnedTensor::make(DType::kF32, {n, n_v, dv});
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  ref::gated_delta_rule(want.tensor, h.view(h.packed.f32.tensor, h.a.f32.tensor, h.b.f32.tensor, h.a_log.tensor,
                                            h.dt_bias.tensor),
                        st_ref.tensor, m.host_view(), scale);
  DeviceTensor pd = DeviceTensor::upload(h.packed.data.tensor), ad = DeviceTensor::upload(h.a.data.tensor);
  DeviceTensor bd = DeviceTensor::upload(h.b.data.tensor), ald = DeviceTensor::upload(h.a_log.tensor);
  DeviceTensor dtd = DeviceTensor::upload(h.dt_bias.tensor), sd = DeviceTensor::upload(st.tensor);
  DeviceTensor od = DeviceTensor::upload(random_tensor(at, {n, n_v, dv}, rng).tensor);
  const DevMeta dm = upload(m);
  gated_delta_rule(ctx, od.tensor, h.view(pd.tensor, ad.tensor, bd.tensor, ald.tensor, dtd.tensor), sd.tensor,
                   dm.view(), scale);
  const std::string what = strfmt("%s n_k %lld n_v %lld dk %lld dv %lld", dtype_name(at), (long long)n_k,
                                  (long long)n_v, (long long)dk, (long long)dv);
  expect_close(od.download().tensor, want.tensor, tolerance(at, 1e-4f), "delta out " + what);
  expect_close(sd.download().tensor, st_ref.tensor, 1e-4f, "delta state " + what);
}

TEST_F(CudaTest, GatedDeltaRuleMatchesReference) {
  std::mt19937 rng(952);
  for (DType at : kActDtypes) {
    check_delta(ctx_, at, make_meta(kLens, kFirst, kSlots), 2, 4, 16, 16, rng);
    check_delta(ctx_, at, make_meta(kLens, kFirst, kSlots), 1, 3, 8, 13, rng);
    check_delta(ctx_, at, make_meta(kLens, kFirst, kSlots), 3, 3, 33, 40, rng);
    // Decode rows at the Qwen3.5 head size: 128 x 128 f32 state = 64 KiB of shared memory per block.
    check_delta(ctx_, at, make_meta({1, 1, 1}, {9, 3, 0}, {3, 0, 1}), 2, 4, 128, 128, rng);
  }
}

// Forces one form of gated_delta_rule for a scope.
struct FormScope {
  explicit FormScope(DeltaRuleForm f) { set_delta_rule_form_for_testing(f); }
  ~FormScope() { set_delta_rule_form_for_testing(DeltaRuleForm::kAuto); }
};

// The chunked kernel (forced for every run, and in kAuto for the long ones) against the recurrent CPU
// reference: chunk boundaries, GQA ratios, a dv that leaves a partial 32-column tile, fresh and continuing
// sequences, the 128 x 128 head size.
TEST_F(CudaTest, ChunkedDeltaRuleMatchesReference) {
  std::mt19937 rng(954);
  for (DeltaRuleForm form : {DeltaRuleForm::kChunked, DeltaRuleForm::kAuto}) {
    FormScope f(form);
    for (int len : {1, 63, 64, 65, 200, 513}) {
      SCOPED_TRACE(strfmt("form %d len %d", static_cast<int>(form), len));
      check_delta(ctx_, DType::kF32, make_meta({len}, {0}, {1}), 1, 2, 16, 24, rng);
      check_delta(ctx_, DType::kF32, make_meta({len}, {37}, {3}), 2, 6, 32, 40, rng);
      check_delta(ctx_, DType::kF32, make_meta({len}, {0}, {2}), 3, 3, 13, 7, rng);
    }
    for (DType at : kActDtypes) {
      SCOPED_TRACE(strfmt("form %d %s", static_cast<int>(form), dtype_name(at)));
      check_delta(ctx_, at, make_meta({200}, {0}, {0}), 2, 4, 128, 128, rng);
      check_delta(ctx_, at, make_meta({65}, {11}, {1}), 2, 4, 128, 128, rng);
    }
  }
}

// A mixed step: long fresh and continuing prompts, a long padding row, short runs, a decode row and an
// empty sequence, in every form (kAuto sends each sequence to its own kernel within one call).
TEST_F(CudaTest, ChunkedDeltaRuleMixedBatch) {
  std::mt19937 rng(955);
  const std::vector<int> lens = {130, 65, 70, 9, 1, 0}, first = {0, 200, 0, 17, 40, 3}, slots = {0, 2, -1, 3, 1, 1};
  for (DeltaRuleForm form : {DeltaRuleForm::kAuto, DeltaRuleForm::kChunked, DeltaRuleForm::kRecurrent}) {
    FormScope f(form);
    SCOPED_TRACE(strfmt("form %d", static_cast<int>(form)));
    for (DType at : kActDtypes) {
      check_delta(ctx_, at, make_meta(lens, first, slots), 2, 4, 16, 40, rng);
      check_delta(ctx_, at, make_meta(lens, first, slots), 16, 32, 128, 128, rng);
    }
  }
}

TEST_F(CudaTest, GatedNormAndSigmoidGateMatchReference) {
  std::mt19937 rng(953);
  for (DType at : kActDtypes)
    for (int64_t d : {1, 16, 37, 128}) {
      HostPair x = random_pair(at, {6, 2 * d}, rng), z = random_pair(at, {6, d}, rng);
      OwnedTensor w = random_tensor(DType::kBF16, {d}, rng);
      OwnedTensor want = OwnedTensor::make(DType::kF32, {6, d});
      const Tensor xs_host = x.f32.tensor.slice(1, d, 2 * d);  // strided rows, like the attention gate
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor), zd = DeviceTensor::upload(z.data.tensor);
      DeviceTensor wd = DeviceTensor::upload(w.tensor), od = DeviceTensor::upload(random_tensor(at, {6, d}, rng).tensor);
      const Tensor xs = xd.tensor.slice(1, d, 2 * d);
      ref::rms_norm_gated(want.tensor, xs_host, z.f32.tensor, w.tensor, 1e-6f);
      rms_norm_gated(ctx_, od.tensor, xs, zd.tensor, wd.tensor, 1e-6f);
      expect_close(od.download().tensor, want.tensor, tolerance(at), strfmt("rms_norm_gated %s d %lld", dtype_name(at), (long long)d));
      ref::sigmoid_mul(want.tensor, z.f32.tensor, xs_host);
      sigmoid_mul(ctx_, od.tensor, zd.tensor, xs);
      expect_close(od.download().tensor, want.tensor, tolerance(at), strfmt("sigmoid_mul %s d %lld", dtype_name(at), (long long)d));
      HostPair g1 = random_pair(at, {6, 1}, rng);  // one gate per row
      DeviceTensor g1d = DeviceTensor::upload(g1.data.tensor);
      ref::sigmoid_mul(want.tensor, z.f32.tensor, g1.f32.tensor);
      sigmoid_mul(ctx_, od.tensor, zd.tensor, g1d.tensor);
      expect_close(od.download().tensor, want.tensor, tolerance(at), strfmt("sigmoid_mul broadcast %s d %lld", dtype_name(at), (long long)d));
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
