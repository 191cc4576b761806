// The quantized KV cache on CUDA (--kv-quant int8 / int4 / fp8): kv_write and rope_kv_write write exactly
// the codes and params the CPU writes for the same rows (kv_quant.h), and paged_attention over a quantized
// cache matches kernels/ref over the same codes for decode steps (the SIMT flash-decoding kernel: GQA
// 1/3/4/8, head_dim 64/128/80/256/72, block sizes 16 and 5, forced slice counts), prefill chunks and mixed
// steps (the tensor-core kernel for bf16 q and head_dim 64/128, else the general tiled kernel), sliding
// windows and softcap, and groups the decode kernel does not take (group 4: routed to the general kernel);
// batched decode steps on the packed tensor-core kernel within f16 rounding.
#include <cstring>

#include "attention_test_util.h"
#include "kernels/float_io.h"
#include "kernels/kv_quant.h"

namespace bunsen::kernels::test {
namespace {

enum class Fmt { kInt8, kInt4, kFp8 };
constexpr Fmt kFmts[] = {Fmt::kInt8, Fmt::kInt4, Fmt::kFp8};

int bits_of(Fmt f) { return f == Fmt::kInt4 ? 4 : 8; }
const char* name_of(Fmt f) { return f == Fmt::kInt8 ? "int8" : f == Fmt::kInt4 ? "int4" : "fp8"; }

// A quantized cache on the host: codes [n_blocks, block_size, kvh, hd * bits / 8] u8, params [..., 2 * groups].
struct QuantCache {
  OwnedTensor k, v, kp, vp;
  int bits = 8, group = 64;
  bool fp8 = false;
  PagedKv cache() const { return {k.tensor, v.tensor, kp.tensor, vp.tensor, bits, group, fp8}; }
};

OwnedTensor random_bytes(std::initializer_list<int64_t> shape, std::mt19937& rng) {
  OwnedTensor t = OwnedTensor::make(DType::kU8, shape);
  for (size_t i = 0; i < t.tensor.nbytes(); ++i) t.tensor.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xffu);
  return t;
}

QuantCache empty_quant_cache(Fmt f, int group, int64_t n_blocks, int64_t block_size, int64_t kvh, int64_t hd,
                             std::mt19937& rng) {
  QuantCache c;
  c.bits = bits_of(f);
  c.fp8 = f == Fmt::kFp8;
  c.group = group;
  // Random bytes everywhere: slots nobody writes keep them, and a stale value cannot pass for a written one.
  c.k = random_bytes({n_blocks, block_size, kvh, hd * c.bits / 8}, rng);
  c.v = random_bytes({n_blocks, block_size, kvh, hd * c.bits / 8}, rng);
  c.kp = random_tensor(DType::kF32, {n_blocks, block_size, kvh, 2 * (hd / group)}, rng);
  c.vp = random_tensor(DType::kF32, {n_blocks, block_size, kvh, 2 * (hd / group)}, rng);
  return c;
}

// Every row of an f32 cache [n_blocks, block_size, kvh, hd] quantized with kv_quant.h.
QuantCache quantize_cache(Fmt f, int group, const Tensor& kf, const Tensor& vf, std::mt19937& rng) {
  const int64_t hd = kf.shape[3], rows = kf.shape[0] * kf.shape[1] * kf.shape[2];
  QuantCache c = empty_quant_cache(f, group, kf.shape[0], kf.shape[1], kf.shape[2], hd, rng);
  const int64_t cb = c.k.tensor.shape[3], pb = c.kp.tensor.shape[3];
  for (int64_t r = 0; r < rows; ++r) {
    kv_quantize_row(kf.ptr<float>() + r * hd, hd, c.bits, group, c.k.tensor.ptr<uint8_t>() + r * cb,
                    c.kp.tensor.ptr<float>() + r * pb, c.fp8);
    kv_quantize_row(vf.ptr<float>() + r * hd, hd, c.bits, group, c.v.tensor.ptr<uint8_t>() + r * cb,
                    c.vp.tensor.ptr<float>() + r * pb, c.fp8);
  }
  return c;
}

struct DeviceQuantCache {
  DeviceTensor k, v, kp, vp;
  int bits = 8, group = 64;
  bool fp8 = false;
  PagedKv cache() const { return {k.tensor, v.tensor, kp.tensor, vp.tensor, bits, group, fp8}; }
};

DeviceQuantCache upload(const QuantCache& c) {
  return {DeviceTensor::upload(c.k.tensor), DeviceTensor::upload(c.v.tensor), DeviceTensor::upload(c.kp.tensor),
          DeviceTensor::upload(c.vp.tensor), c.bits, c.group, c.fp8};
}

void expect_same_bytes(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  const auto* g = static_cast<const uint8_t*>(got.data);
  const auto* w = static_cast<const uint8_t*>(want.data);
  int64_t diff = 0, first = -1;
  for (size_t i = 0; i < got.nbytes(); ++i)
    if (g[i] != w[i]) {
      ++diff;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  EXPECT_EQ(diff, 0) << what << ": " << diff << " bytes differ, first at byte " << first;
}

void expect_same_cache(const DeviceQuantCache& d, const QuantCache& want, const std::string& what) {
  expect_same_bytes(d.k.download().tensor, want.k.tensor, what + " k codes");
  expect_same_bytes(d.v.download().tensor, want.v.tensor, what + " v codes");
  expect_same_bytes(d.kp.download().tensor, want.kp.tensor, what + " k params");
  expect_same_bytes(d.vp.download().tensor, want.vp.tensor, what + " v params");
}

// paged_attention on the device over the codes of the scenario's (f32, random) cache vs ref over the same
// codes on the host.
// Returns the device output; tol < 0: the default tolerance below.
std::vector<float> check_quant_attention(Context& ctx, Scenario s, Fmt f, int group, const std::string& what,
                                         uint32_t seed = 501, float tol = -1.0f) {
  s.cache_dtype = DType::kF32;
  std::mt19937 rng(seed);
  Batch b = make_batch(s, rng);
  const QuantCache qc = quantize_cache(f, group, b.k_cache.tensor, b.v_cache.tensor, rng);
  const Tensor& q = b.q.f32.tensor;
  OwnedTensor want = OwnedTensor::make(DType::kF32, {q.shape[0], q.shape[1], q.shape[2]});
  ref::paged_attention(want.tensor, q, qc.cache(), b.meta(), s.params);
  DeviceBatch d = upload(b, s.out_dtype, rng);
  const DeviceQuantCache dc = upload(qc);
  paged_attention(ctx, d.out.tensor, d.q.tensor, dc.cache(), d.meta(), s.params);
  // bf16 outputs: twice the bf16 storage tolerance, since the tensor-core prefill kernel rounds the
  // dequantized K/V tiles to bf16 once more (the reference dequantizes in f32); seen at 1.2e-2 on the H200.
  if (tol < 0.0f) tol = s.out_dtype == DType::kBF16 ? 2e-2f : 1e-4f;
  std::vector<float> got = values(d.out.download().tensor);
  expect_close(got, values(want.tensor), tol, what + " " + name_of(f) + strfmt(" group %d", group));
  return got;
}

int group_for(int64_t head_dim) { return head_dim % 64 == 0 ? 64 : static_cast<int>(head_dim); }

Scenario quant_decode_scenario(int64_t group, int64_t head_dim, std::vector<int64_t> lens) {
  Scenario s = decode_scenario(group, head_dim, std::move(lens));
  s.out_dtype = DType::kF32;
  return s;
}

const std::vector<int64_t> kMixedLens = {1, 15, 16, 17, 700, 2049};

TEST_F(CudaTest, QuantKvDecodeMatchesCpuOverSameCodes) {
  for (Fmt f : kFmts)
    for (int64_t gqa : {1, 3, 4, 8})
      for (int64_t head_dim : {64, 128, 80, 256, 72}) {
        const Scenario s = quant_decode_scenario(gqa, head_dim, kMixedLens);
        check_quant_attention(ctx_, s, f, group_for(head_dim),
                              strfmt("decode gqa %lld head_dim %lld", (long long)gqa, (long long)head_dim));
      }
}

TEST_F(CudaTest, QuantKvDecodeQueryDtypesBlockSizesSplitsAndGroups) {
  for (Fmt f : kFmts) {
    for (DType dt : kActDtypes)
      for (int64_t block_size : {5, 16}) {
        Scenario s = quant_decode_scenario(4, 128, kMixedLens);
        s.n_kv_heads = 3;
        s.n_heads = 12;
        s.block_size = block_size;
        s.q_dtype = dt;
        s.out_dtype = dt;
        check_quant_attention(ctx_, s, f, 64, strfmt("q/out %s block %lld", dtype_name(dt), (long long)block_size));
      }
    for (int splits : {1, 3, 17}) {
      cuda::set_attention_splits_for_testing(splits);
      check_quant_attention(ctx_, quant_decode_scenario(2, 128, kMixedLens), f, 64, strfmt("splits %d", splits));
    }
    cuda::set_attention_splits_for_testing(0);
    for (int group : {32, 128, 8, 4})  // 4: not a multiple of 8, the general kernel takes the decode step
      check_quant_attention(ctx_, quant_decode_scenario(4, 128, kMixedLens), f, group, "decode");
  }
}

TEST_F(CudaTest, QuantKvPrefillAndMixedStepsMatchCpu) {
  for (Fmt f : kFmts)
    for (int64_t head_dim : {64, 128, 96})
      for (bool interleave : {false, true}) {
        Scenario s;
        s.n_kv_heads = 2;
        s.n_heads = 8;
        s.head_dim = head_dim;
        s.block_size = 16;
        s.q_dtype = DType::kBF16;
        s.out_dtype = DType::kBF16;
        s.seq_lens = {1, 37, 300, 9, 70};
        s.new_tokens = {1, 6, 1, 9, 70};  // decode, prefill chunk, decode, whole prompt, whole prompt
        s.interleave = interleave;
        s.params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        check_quant_attention(ctx_, s, f, group_for(head_dim),
                              strfmt("mixed head_dim %lld interleave %d", (long long)head_dim, interleave ? 1 : 0));
        s.new_tokens = {1, 37, 300, 9, 70};  // pure prefill
        check_quant_attention(ctx_, s, f, 32, strfmt("prefill head_dim %lld", (long long)head_dim));
        s.q_dtype = DType::kF32;  // f32 q: the general kernel, exact f32 dequantization
        s.out_dtype = DType::kF32;
        check_quant_attention(ctx_, s, f, 32, strfmt("prefill f32 q head_dim %lld", (long long)head_dim));
      }
}

TEST_F(CudaTest, QuantKvSlidingWindowAndSoftcap) {
  for (Fmt f : kFmts)
    for (int window : {1, 7, 300})
      for (float softcap : {0.0f, 5.0f}) {
        Scenario s = quant_decode_scenario(4, 128, kMixedLens);
        s.params = {0.3f, window, softcap, {}};
        s.release_out_of_window = true;
        check_quant_attention(ctx_, s, f, 64, strfmt("decode window %d softcap %g", window, softcap), 502);
        Scenario p = s;
        p.seq_lens = {40, 333, 9};
        p.new_tokens = {40, 5, 1};
        p.out_dtype = DType::kBF16;  // the tensor-core kernel: K/V and P rounded to bf16, bf16-level error
        check_quant_attention(ctx_, p, f, 64, strfmt("prefill window %d softcap %g", window, softcap), 503);
      }
}

// The packed tensor-core kernel for quantized caches (attention_decode_qmma.cu: batched decode steps, forced
// here by the testing switch) against the reference over the same codes. Its K and V reach the MMAs rounded
// to f16 once (relative 2^-11 per element; the SIMT kernel dequantizes in f32, 1e-4), so the tolerance is
// 2e-3 for f32 outputs. 4 and 8 warps per block, head_dim 64/128, GQA 1/4/8 over 3 kv heads (a partial last
// block), groups 32/64/128, block sizes 16 and 5, 1 or 3 slices per row, bf16 and f32 q, a sliding window
// with released blocks and a softcap, for int8, int4 and fp8. The same steps on the SIMT kernel must differ
// somewhere (the path was taken).
TEST_F(CudaTest, QuantKvPackedTensorCoreDecodeMatchesCpu) {
  struct Reset {
    ~Reset() { reset_decode_switches(), cuda::set_attention_splits_for_testing(0); }
  } reset;
  std::vector<int64_t> lens;
  for (int i = 0; i < 12; ++i) lens.push_back(1 + (i * 389) % 1500);
  lens.push_back(2049);
  int n = 0;
  for (Fmt f : kFmts)
    for (int batched : {2, 3})
      for (int64_t head_dim : {64, 128})
        for (int64_t gqa : {1, 4, 8}) {
          ++n;
          Scenario s = quant_decode_scenario(gqa, head_dim, lens);
          s.n_kv_heads = 3;
          s.n_heads = 3 * gqa;
          s.block_size = n % 2 == 0 ? 16 : 5;
          s.q_dtype = n % 3 == 0 ? DType::kF32 : DType::kBF16;
          const int group = head_dim == 64 ? (n % 2 == 0 ? 32 : 64)
                                           : (n % 3 == 0   ? 128
                                              : n % 3 == 1 ? 64
                                                           : 32);
          const int splits = n % 4 == 0 ? 1 : 3;
          if (n % 5 == 0) {
            s.params = {0.3f, 300, 5.0f, {}};
            s.release_out_of_window = true;
          }
          const std::string what = strfmt("warps %d head_dim %lld gqa %lld block %lld splits %d q %s",
                                          batched == 2 ? 4 : 8, (long long)head_dim, (long long)gqa,
                                          (long long)s.block_size, splits, dtype_name(s.q_dtype));
          cuda::set_attention_splits_for_testing(splits);
          set_decode_switches(0, 0, 0, batched);
          cuda::set_attention_decode_quant_mma_for_testing(2);
          const std::vector<float> packed = check_quant_attention(ctx_, s, f, group, what, 505, 2e-3f);
          set_decode_switches(1, 0, 0, 1);  // SIMT
          const std::vector<float> simt = check_quant_attention(ctx_, s, f, group, what + " (SIMT)", 505);
          EXPECT_NE(packed, simt) << what << " " << name_of(f) << ": the tensor-core path was not taken";
        }
  // 64 rows x 2 kv heads: past the packed kernel's threshold (128 rows x kv heads), so the default path is
  // it.
  reset_decode_switches();
  cuda::set_attention_splits_for_testing(0);
  std::vector<int64_t> many;
  for (int i = 0; i < 64; ++i) many.push_back(1 + (i * 211) % 1100);
  for (Fmt f : kFmts) {
    const Scenario s = quant_decode_scenario(4, 128, many);
    cuda::set_attention_decode_quant_mma_for_testing(2);
    const std::vector<float> chosen =
        check_quant_attention(ctx_, s, f, 64, "64 rows, chosen path", 506, 2e-3f);
    set_decode_switches(0, 0, 0, 2);
    const std::vector<float> packed = check_quant_attention(ctx_, s, f, 64, "64 rows, packed", 506, 2e-3f);
    cuda::set_attention_decode_quant_mma_for_testing(1);  // off: the SIMT kernel
    const std::vector<float> simt = check_quant_attention(ctx_, s, f, 64, "64 rows, switch off", 506);
    reset_decode_switches();
    expect_close(chosen, packed, 0.0f,
                 std::string("64 rows: the chosen path is the packed kernel, ") + name_of(f));
    EXPECT_NE(chosen, simt) << "64 rows, " << name_of(f) << ": the switch did not turn the kernel off";
  }
}

// kv_write on the device writes the CPU's codes and params, and leaves slots with slot < 0 alone.
TEST_F(CudaTest, QuantKvWriteCodesEqualCpuCodes) {
  std::mt19937 rng(504);
  for (Fmt f : kFmts)
    for (DType act : kActDtypes)
      for (auto [hd, group] : {std::pair<int64_t, int>{128, 64}, {64, 64}, {80, 80}, {256, 32}, {8, 8}, {512, 64}}) {
        const int64_t n_tokens = 9, kvh = 3, n_blocks = 5, block = 4;
        const std::string what = strfmt("%s act %s hd %lld group %d", name_of(f), dtype_name(act), (long long)hd, group);
        // Wide ranges and a constant row (scale 0) among the random ones.
        HostPair k = random_pair(act, {n_tokens, kvh, hd}, rng, -40.0f, 25.0f);
        HostPair v = random_pair(act, {n_tokens, kvh, hd}, rng, -0.01f, 0.03f);
        for (int64_t d = 0; d < hd; ++d) {
          store_f(k.data.tensor.data, act, 2 * kvh * hd + d, 1.5f);
          k.f32.tensor.ptr<float>()[2 * kvh * hd + d] = 1.5f;
        }
        OwnedTensor slots = OwnedTensor::make(DType::kI64, {n_tokens});
        const int64_t sv[n_tokens] = {3, -1, 0, 19, 7, 8, -1, 12, 1};
        std::memcpy(slots.tensor.data, sv, sizeof(sv));
        QuantCache want = empty_quant_cache(f, group, n_blocks, block, kvh, hd, rng);
        DeviceQuantCache dc = upload(want);
        Context cpu;
        kv_write(cpu, want.cache(), k.f32.tensor, v.f32.tensor, slots.tensor);
        DeviceTensor kd = DeviceTensor::upload(k.data.tensor), vd = DeviceTensor::upload(v.data.tensor);
        DeviceTensor sd = DeviceTensor::upload(slots.tensor);
        kv_write(ctx_, dc.cache(), kd.tensor, vd.tensor, sd.tensor);
        expect_same_cache(dc, want, what);
      }
}

// Rows built so that every element lands exactly on a rounding tie (scale 1: int8 row [0, 255, k + 0.5...],
// int4 [0, 15, k + 0.5...], fp8 [448, midpoints of adjacent e4m3 values...]): the device rounds ties to
// even exactly as the CPU's nearbyint / f32_to_e4m3 do.
TEST_F(CudaTest, QuantKvWriteTiesRoundToEvenLikeTheCpu) {
  const int64_t hd = 64, kvh = 1, n_tokens = 4;
  for (Fmt f : kFmts) {
    OwnedTensor k = OwnedTensor::make(DType::kF32, {n_tokens, kvh, hd});
    float* x = k.tensor.ptr<float>();
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* r = x + t * hd;
      const float top = f == Fmt::kInt8 ? 255.0f : f == Fmt::kInt4 ? 15.0f : 448.0f;
      r[0] = f == Fmt::kFp8 ? -top * (t % 2 == 0 ? 1.0f : -1.0f) : 0.0f;
      r[1] = top;
      for (int64_t d = 2; d < hd; ++d) {
        const int64_t i = (d * 7 + t * 13) % (f == Fmt::kInt8 ? 255 : f == Fmt::kInt4 ? 15 : 0x7d);
        r[d] = f == Fmt::kFp8 ? 0.5f * (e4m3_to_f32(static_cast<uint8_t>(i)) + e4m3_to_f32(static_cast<uint8_t>(i + 1))) *
                                    (d % 3 == 0 ? -1.0f : 1.0f)
                              : static_cast<float>(i) + 0.5f;
      }
    }
    OwnedTensor slots = OwnedTensor::make(DType::kI64, {n_tokens});
    for (int64_t t = 0; t < n_tokens; ++t) slots.tensor.ptr<int64_t>()[t] = 3 * t;
    std::mt19937 rng(506);
    QuantCache want = empty_quant_cache(f, 64, 4, 3, kvh, hd, rng);
    DeviceQuantCache dc = upload(want);
    Context cpu;
    kv_write(cpu, want.cache(), k.tensor, k.tensor, slots.tensor);
    EXPECT_EQ(want.kp.tensor.ptr<float>()[0], 1.0f) << name_of(f) << ": the rows have scale 1";
    DeviceTensor kd = DeviceTensor::upload(k.tensor), sd = DeviceTensor::upload(slots.tensor);
    kv_write(ctx_, dc.cache(), kd.tensor, kd.tensor, sd.tensor);
    expect_same_cache(dc, want, std::string(name_of(f)) + " ties");
  }
}

// rope_kv_write (one fused launch) on a quantized cache: the cache holds the CPU's codes of the k rows as
// rotated and stored by the kernel, and of the v rows; q and k are rotated as the unfused rope does.
TEST_F(CudaTest, QuantRopeKvWriteCodesEqualCpuCodesOfRotatedRows) {
  std::mt19937 rng(505);
  for (Fmt f : kFmts)
    for (DType act : kActDtypes)
      for (auto [hd, rotary] : {std::pair<int64_t, int>{128, 128}, {64, 32}, {256, 256}}) {
        const int64_t n_tokens = 6, nh = 4, kvh = 2, n_blocks = 4, block = 3;
        const std::string what = strfmt("%s act %s hd %lld rotary %d", name_of(f), dtype_name(act), (long long)hd, rotary);
        std::vector<float> inv_freq(static_cast<size_t>(rotary / 2));
        for (int i = 0; i < rotary / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary);
        const RopeParams p{inv_freq.data(), rotary, 1.0f};
        HostPair q = random_pair(act, {n_tokens, nh, hd}, rng, -2.0f, 2.0f);
        HostPair k = random_pair(act, {n_tokens, kvh, hd}, rng, -5.0f, 3.0f);
        HostPair v = random_pair(act, {n_tokens, kvh, hd}, rng, -1.0f, 1.0f);
        OwnedTensor pos = OwnedTensor::make(DType::kI32, {n_tokens}), slots = OwnedTensor::make(DType::kI64, {n_tokens});
        const int32_t pv[n_tokens] = {0, 1, 9, 4095, 70000, 3};
        const int64_t sv[n_tokens] = {11, -1, 0, 5, 6, 2};
        std::memcpy(pos.tensor.data, pv, sizeof(pv));
        std::memcpy(slots.tensor.data, sv, sizeof(sv));
        QuantCache want = empty_quant_cache(f, 64 <= hd ? 64 : static_cast<int>(hd), n_blocks, block, kvh, hd, rng);
        DeviceQuantCache dc = upload(want);
        DeviceTensor qd = DeviceTensor::upload(q.data.tensor), kd = DeviceTensor::upload(k.data.tensor);
        DeviceTensor vd = DeviceTensor::upload(v.data.tensor), pd = DeviceTensor::upload(pos.tensor);
        DeviceTensor sd = DeviceTensor::upload(slots.tensor);
        rope_kv_write(ctx_, qd.tensor, kd.tensor, vd.tensor, dc.cache(), pd.tensor, sd.tensor, p);
        // The unfused rope on copies rotates q and k the same way.
        DeviceTensor q2 = DeviceTensor::upload(q.data.tensor), k2 = DeviceTensor::upload(k.data.tensor);
        rope(ctx_, q2.tensor, pd.tensor, p);
        rope(ctx_, k2.tensor, pd.tensor, p);
        const OwnedTensor k_rot = kd.download();
        expect_close(qd.download().tensor, q2.download().tensor, tolerance(act, 1e-6f), what + " q");
        expect_close(k_rot.tensor, k2.download().tensor, tolerance(act, 1e-6f), what + " k");
        Context cpu;
        kv_write(cpu, want.cache(), to_f32(k_rot.tensor).tensor, v.f32.tensor, slots.tensor);
        expect_same_cache(dc, want, what);
      }
}

}  // namespace
}  // namespace bunsen::kernels::test
