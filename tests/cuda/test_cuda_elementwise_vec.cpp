// The vectorised element-wise CUDA paths (vec8.cuh: silu_mul, gelu_tanh_mul, add_scaled, scale, softcap)
// against kernels/ref and against their scalar fallback: each case runs once on 16-byte aligned rows
// (the 8-wide path, plus its scalar tail when n % 8 != 0) and once on rows shifted by one element (the
// flat scalar kernel), at m = 1, 3, 2048 and n = 14336, 8191, 7. The two paths must store the same bits,
// and the columns around the view must stay untouched. Skips without a GPU.
#include <cstring>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

enum class Op { kSiluMul, kGeluTanhMul, kAddScaled, kScale, kSoftcap };

const char* op_name(Op op) {
  switch (op) {
    case Op::kSiluMul: return "silu_mul";
    case Op::kGeluTanhMul: return "gelu_tanh_mul";
    case Op::kAddScaled: return "add_scaled";
    case Op::kScale: return "scale";
    case Op::kSoftcap: return "softcap";
  }
  return "?";
}

constexpr float kAddScale = -0.75f, kScaleBy = 3.0f, kCap = 5.0f;

// x [m, n]: the out (silu_mul, gelu_tanh_mul) or the in-place operand holding its starting values;
// a, b [m, n]: the inputs (gate, up; y for add_scaled).
void run_device(Context& ctx, Op op, Tensor x, Tensor a, Tensor b) {
  switch (op) {
    case Op::kSiluMul: silu_mul(ctx, x, a, b); break;
    case Op::kGeluTanhMul: gelu_tanh_mul(ctx, x, a, b); break;
    case Op::kAddScaled: add_scaled(ctx, x, a, kAddScale); break;
    case Op::kScale: scale(ctx, x, kScaleBy); break;
    case Op::kSoftcap: softcap(ctx, x, kCap); break;
  }
}

void run_ref(Op op, Tensor x, Tensor a, Tensor b) {
  switch (op) {
    case Op::kSiluMul: ref::silu_mul(x, a, b); break;
    case Op::kGeluTanhMul: ref::gelu_tanh_mul(x, a, b); break;
    case Op::kAddScaled: ref::add_scaled(x, a, kAddScale); break;
    case Op::kScale: ref::scale(x, kScaleBy); break;
    case Op::kSoftcap: ref::softcap(x, kCap); break;
  }
}

constexpr int kPadByte = 0x5a;

// src [m, n] copied into columns [col0, col0 + n) of a [m, width] tensor whose other bytes are kPadByte.
OwnedTensor embed(const Tensor& src, int64_t width, int64_t col0) {
  const int64_t m = src.shape[0], n = src.shape[1];
  OwnedTensor w = OwnedTensor::make(src.dtype, {m, width});
  std::memset(w.tensor.data, kPadByte, w.tensor.nbytes());
  const size_t es = dtype_size(src.dtype);
  for (int64_t r = 0; r < m; ++r)
    std::memcpy(static_cast<char*>(w.tensor.row_ptr(r)) + col0 * es, src.row_ptr(r), static_cast<size_t>(n) * es);
  return w;
}

// Runs op with every operand laid out as columns [col0, col0 + n) of [m, width] rows; returns x's view
// (contiguous [m, n]) and checks that the bytes around it were left alone.
OwnedTensor run_layout(Context& ctx, Op op, const Tensor& x, const Tensor& a, const Tensor& b, int64_t width,
                       int64_t col0, const std::string& what) {
  const int64_t n = x.shape[1];
  OwnedTensor xw = embed(x, width, col0), aw = embed(a, width, col0), bw = embed(b, width, col0);
  DeviceTensor xd = DeviceTensor::upload(xw.tensor), ad = DeviceTensor::upload(aw.tensor);
  DeviceTensor bd = DeviceTensor::upload(bw.tensor);
  run_device(ctx, op, xd.tensor.slice(1, col0, col0 + n), ad.tensor.slice(1, col0, col0 + n),
             bd.tensor.slice(1, col0, col0 + n));
  OwnedTensor got = xd.download();
  const size_t es = dtype_size(x.dtype);
  for (int64_t r = 0; r < x.shape[0]; ++r) {
    const auto* row = static_cast<const unsigned char*>(got.tensor.row_ptr(r));
    for (int64_t c = 0; c < width; ++c) {
      if (c >= col0 && c < col0 + n) continue;
      for (size_t i = 0; i < es; ++i)
        if (row[c * es + i] != kPadByte) {
          ADD_FAILURE() << what << ": row " << r << " column " << c << " (outside the view) was written";
          return clone(got.tensor.slice(1, col0, col0 + n));
        }
    }
  }
  return clone(got.tensor.slice(1, col0, col0 + n));
}

TEST_F(CudaTest, ElementwiseVectorPathMatchesReferenceAndScalarPathBitForBit) {
  std::mt19937 rng(501);
  for (Op op : {Op::kSiluMul, Op::kGeluTanhMul, Op::kAddScaled, Op::kScale, Op::kSoftcap})
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{2048}})
      for (int64_t n : {int64_t{14336}, int64_t{8191}, int64_t{7}})
        for (DType in_dt : kActDtypes)
          for (DType x_dt : kActDtypes) {
            // The large shapes once, in the model's dtypes (bf16 in and out).
            if (m * n > 100000 && (in_dt != DType::kBF16 || x_dt != DType::kBF16)) continue;
            const std::string what = strfmt("%s in %s x %s m %lld n %lld", op_name(op), dtype_name(in_dt),
                                            dtype_name(x_dt), (long long)m, (long long)n);
            SCOPED_TRACE(what);
            HostPair a = random_pair(in_dt, {m, n}, rng, -6.0f, 6.0f), b = random_pair(in_dt, {m, n}, rng);
            HostPair x = random_pair(x_dt, {m, n}, rng, -8.0f, 8.0f);
            OwnedTensor want = clone(x.f32.tensor);
            run_ref(op, want.tensor, a.f32.tensor, b.f32.tensor);
            // Aligned rows (width a multiple of 8 elements): the 8-wide path and, for n % 8 != 0, its tail.
            const int64_t aligned_width = (n + 7) / 8 * 8 + 8;
            OwnedTensor vec = run_layout(ctx_, op, x.data.tensor, a.data.tensor, b.data.tensor, aligned_width, 0, what);
            expect_close(vec.tensor, want.tensor, tolerance(x_dt), what + " (vector path)");
            // Rows starting one element in: not 16-byte aligned, the scalar kernel.
            OwnedTensor scalar = run_layout(ctx_, op, x.data.tensor, a.data.tensor, b.data.tensor, n + 2, 1, what);
            ASSERT_EQ(std::memcmp(vec.tensor.data, scalar.tensor.data, vec.tensor.nbytes()), 0)
                << what << ": the vector and scalar paths differ";
          }
}

// The model's own layout: gate and up as the two halves of one fused [m, 2f] projection row.
TEST_F(CudaTest, SiluMulVectorPathOnFusedGateUpHalves) {
  std::mt19937 rng(502);
  for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    const int64_t f = 14336;
    HostPair fused = random_pair(DType::kBF16, {m, 2 * f}, rng, -6.0f, 6.0f);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f});
    ref::silu_mul(want.tensor, fused.f32.tensor.slice(1, 0, f), fused.f32.tensor.slice(1, f, 2 * f));
    DeviceTensor fd = DeviceTensor::upload(fused.data.tensor);
    DeviceTensor od = DeviceTensor::upload(random_tensor(DType::kBF16, {m, f}, rng).tensor);
    silu_mul(ctx_, od.tensor, fd.tensor.slice(1, 0, f), fd.tensor.slice(1, f, 2 * f));
    expect_close(od.download().tensor, want.tensor, tolerance(DType::kBF16), strfmt("m %lld", (long long)m));
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
