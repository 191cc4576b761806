// rope_kv_write's vectorised kernel (plain cache, aligned rows, rotary_dim % 16 == 0) against the unfused
// reference (rope, rope, kv_write on f32 copies) and against the per-row kernel it replaces: the same
// call on rows shifted by one element (unaligned, so the per-row kernel runs) must leave q, k and both
// caches with the same bits. Llama-3.1-8B heads (32 q, 8 kv, head_dim 128) at 1, 3, 64 and 2048 tokens,
// partial rotary (pass-through dims copied to the cache), rotary_dim 0, skipped slots. Skips without a GPU.
#include <cmath>
#include <cstring>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

struct RopeShape {
  int64_t n_tokens, nh, kvh, hd;
  int rotary;
};

// Heads [n_tokens, heads, hd] starting at head `head0` of a fused qkv row that begins `lead` elements in.
Tensor heads_at(const Tensor& fused, int64_t lead, int64_t head0, int64_t heads, int64_t hd) {
  Tensor t = fused.slice(1, lead + head0 * hd, lead + (head0 + heads) * hd);
  t.ndim = 3;
  t.shape[1] = heads;
  t.shape[2] = hd;
  t.strides[0] = fused.strides[0];
  t.strides[1] = hd;
  t.strides[2] = 1;
  return t;
}

struct RopeRun {
  OwnedTensor qkv, kc, vc;  // qkv [n_tokens, total * hd] (the lead column dropped); caches as stored
};

// One rope_kv_write on device copies; lead = 0: aligned rows (the vectorised kernel), lead = 1: rows one
// element in (the per-row kernel).
RopeRun run_rope(Context& ctx, const RopeShape& s, const Tensor& qkv, const Tensor& kc, const Tensor& vc,
                 const Tensor& pos, const Tensor& slots, const RopeParams& p, int64_t lead) {
  const int64_t total = s.nh + 2 * s.kvh, width = total * s.hd;
  OwnedTensor wide = OwnedTensor::make(qkv.dtype, {s.n_tokens, lead + width});
  std::memset(wide.tensor.data, 0, wide.tensor.nbytes());
  const size_t es = dtype_size(qkv.dtype);
  for (int64_t t = 0; t < s.n_tokens; ++t)
    std::memcpy(static_cast<char*>(wide.tensor.row_ptr(t)) + lead * es, qkv.row_ptr(t), static_cast<size_t>(width) * es);
  DeviceTensor qd = DeviceTensor::upload(wide.tensor), kd = DeviceTensor::upload(kc), vd = DeviceTensor::upload(vc);
  DeviceTensor pd = DeviceTensor::upload(pos), sd = DeviceTensor::upload(slots);
  rope_kv_write(ctx, heads_at(qd.tensor, lead, 0, s.nh, s.hd), heads_at(qd.tensor, lead, s.nh, s.kvh, s.hd),
                heads_at(qd.tensor, lead, s.nh + s.kvh, s.kvh, s.hd), {kd.tensor, vd.tensor}, pd.tensor, sd.tensor, p);
  OwnedTensor got = qd.download();
  return {clone(got.tensor.slice(1, lead, lead + width)), kd.download(), vd.download()};
}

bool same_bits(const OwnedTensor& a, const OwnedTensor& b) {
  return a.tensor.nbytes() == b.tensor.nbytes() && std::memcmp(a.tensor.data, b.tensor.data, a.tensor.nbytes()) == 0;
}

void check_vec_rope_kv(Context& ctx, DType act, DType cache_dt, const RopeShape& s, std::mt19937& rng) {
  const int64_t total = s.nh + 2 * s.kvh, block = 16, n_blocks = (s.n_tokens + 2 + block - 1) / block + 1;
  const std::string what = strfmt("act %s cache %s tokens %lld heads %lld/%lld hd %lld rotary %d", dtype_name(act),
                                  dtype_name(cache_dt), (long long)s.n_tokens, (long long)s.nh, (long long)s.kvh,
                                  (long long)s.hd, s.rotary);
  SCOPED_TRACE(what);
  std::vector<float> inv_freq(static_cast<size_t>(s.rotary / 2 + 1));
  for (int i = 0; i < s.rotary / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / s.rotary);
  const RopeParams p{inv_freq.data(), s.rotary, 1.1f};
  HostPair qkv = random_pair(act, {s.n_tokens, total * s.hd}, rng);
  OwnedTensor kc = random_tensor(cache_dt, {n_blocks, block, s.kvh, s.hd}, rng);
  OwnedTensor vc = random_tensor(cache_dt, {n_blocks, block, s.kvh, s.hd}, rng);
  OwnedTensor pos = OwnedTensor::make(DType::kI32, {s.n_tokens}), slots = OwnedTensor::make(DType::kI64, {s.n_tokens});
  // Slots in reverse order from slot 1 on (slot 0 never written), token 1 skipped (-1) and the last one
  // past the cache when there are 3 or more tokens; positions up to 100000 (sincosf's slow range).
  const int64_t n_slots = n_blocks * block;
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    pos.tensor.ptr<int32_t>()[t] = t == 0 ? 100000 : static_cast<int32_t>(7 * t + 3);
    slots.tensor.ptr<int64_t>()[t] = t == 1 ? -1 : (t == s.n_tokens - 1 && t >= 2) ? n_slots : s.n_tokens - t;
  }
  // The reference: rope, rope, kv_write on f32 copies (the slot past the cache left out: ref rejects it).
  OwnedTensor want = clone(qkv.f32.tensor), kc_want = clone(kc.tensor), vc_want = clone(vc.tensor);
  OwnedTensor ref_slots = clone(slots.tensor);
  for (int64_t t = 0; t < s.n_tokens; ++t)
    if (ref_slots.tensor.ptr<int64_t>()[t] >= n_slots) ref_slots.tensor.ptr<int64_t>()[t] = -1;
  if (s.rotary > 0) {
    ref::rope(heads_at(want.tensor, 0, 0, s.nh, s.hd), pos.tensor, p);
    ref::rope(heads_at(want.tensor, 0, s.nh, s.kvh, s.hd), pos.tensor, p);
  }
  ref::kv_write({kc_want.tensor, vc_want.tensor}, heads_at(want.tensor, 0, s.nh, s.kvh, s.hd),
                heads_at(want.tensor, 0, s.nh + s.kvh, s.kvh, s.hd), ref_slots.tensor);
  const RopeRun vec = run_rope(ctx, s, qkv.data.tensor, kc.tensor, vc.tensor, pos.tensor, slots.tensor, p, 0);
  expect_close(vec.qkv.tensor, want.tensor, tolerance(act, 1e-5f), what + " q|k|v");
  expect_close(vec.kc.tensor, kc_want.tensor, tolerance(cache_dt == DType::kBF16 ? cache_dt : act, 1e-5f),
               what + " k cache");
  expect_close(vec.vc.tensor, vc_want.tensor, 0.0f, what + " v cache (a plain copy)");
  const RopeRun row = run_rope(ctx, s, qkv.data.tensor, kc.tensor, vc.tensor, pos.tensor, slots.tensor, p, 1);
  EXPECT_TRUE(same_bits(vec.qkv, row.qkv)) << what << ": q|k|v differ from the per-row kernel";
  EXPECT_TRUE(same_bits(vec.kc, row.kc)) << what << ": k cache differs from the per-row kernel";
  EXPECT_TRUE(same_bits(vec.vc, row.vc)) << what << ": v cache differs from the per-row kernel";
  // Slot 0 is never written: it keeps its old bits.
  const size_t slot_bytes = static_cast<size_t>(s.kvh * s.hd) * dtype_size(cache_dt);
  EXPECT_EQ(std::memcmp(vec.kc.tensor.data, kc.tensor.data, slot_bytes), 0) << what << ": k slot 0 was written";
  EXPECT_EQ(std::memcmp(vec.vc.tensor.data, vc.tensor.data, slot_bytes), 0) << what << ": v slot 0 was written";
}

TEST_F(CudaTest, RopeKvWriteVectorisedMatchesReferenceAndPerRowKernel) {
  std::mt19937 rng(503);
  for (DType act : kActDtypes)
    for (DType cache_dt : kActDtypes)
      for (const RopeShape& s : {RopeShape{1, 32, 8, 128, 128}, RopeShape{3, 32, 8, 128, 128},
                                 RopeShape{64, 32, 8, 128, 128}, RopeShape{5, 4, 2, 128, 64},
                                 RopeShape{5, 8, 1, 256, 64}, RopeShape{3, 4, 2, 64, 16}, RopeShape{4, 2, 2, 64, 0},
                                 RopeShape{2, 2, 2, 8, 0}, RopeShape{3, 6, 2, 24, 16}})
        check_vec_rope_kv(ctx_, act, cache_dt, s, rng);
  // The prefill shape once, in the model's dtypes.
  check_vec_rope_kv(ctx_, DType::kBF16, DType::kBF16, RopeShape{2048, 32, 8, 128, 128}, rng);
}

}  // namespace
}  // namespace bunsen::kernels::test
