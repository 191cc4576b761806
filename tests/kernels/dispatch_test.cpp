// ops.h validation and routing: mismatched dtypes/shapes, bad indices and CUDA tensors throw
// Error("kernels", "<op>: ...") naming the op and shapes; the backend name follows the ISA level.
#include <cstdlib>

#include "kernel_test_util.h"
#ifdef BUNSEN_HAVE_CUDA
#endif

namespace bunsen::kernels::test {
namespace {

OwnedTensor zeros(DType dt, std::initializer_list<int64_t> shape) {
  return OwnedTensor::make(dt, shape);
}

TEST(Dispatch, LinearNamesOpAndShapes) {
  Context ctx;
  OwnedTensor x = zeros(DType::kF32, {3, 64}), w = zeros(DType::kBF16, {32, 65}),
              out = zeros(DType::kF32, {3, 32});
  try {
    linear(ctx, out.tensor, x.tensor, w.tensor);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernels: linear: x [3, 64] f32 and w [32, 65] bf16 disagree on k");
  }
  OwnedTensor w_ok = zeros(DType::kBF16, {32, 64}), out_bad = zeros(DType::kF32, {3, 31});
  expect_kernel_error([&] { linear(ctx, out_bad.tensor, x.tensor, w_ok.tensor); },
                      {"linear:", "[3, 31]", "disagree on n"});
  OwnedTensor out_m = zeros(DType::kF32, {2, 32});
  expect_kernel_error([&] { linear(ctx, out_m.tensor, x.tensor, w_ok.tensor); },
                      {"linear:", "disagree on m"});
  OwnedTensor x16 = zeros(DType::kF16, {3, 64});
  expect_kernel_error([&] { linear(ctx, out.tensor, x16.tensor, w_ok.tensor); },
                      {"linear:", "x [3, 64] f16", "f32"});
  OwnedTensor bias = zeros(DType::kF32, {33});
  expect_kernel_error([&] { linear(ctx, out.tensor, x.tensor, w_ok.tensor, bias.tensor); },
                      {"linear:", "bias [33]"});
  OwnedTensor wi = zeros(DType::kI32, {32, 64});
  expect_kernel_error([&] { linear(ctx, out.tensor, x.tensor, wi.tensor); }, {"linear:", "w [32, 64] i32"});
  // A column slice is fine for x; a transposed (column-strided) view is not.
  Tensor xt = x.tensor;
  std::swap(xt.strides[0], xt.strides[1]);
  std::swap(xt.shape[0], xt.shape[1]);
  expect_kernel_error([&] { linear(ctx, out.tensor, xt, w_ok.tensor); }, {"linear:", "contiguous last dim"});
}

TEST(Dispatch, RowwiseOpsCheckShapes) {
  Context ctx;
  OwnedTensor a = zeros(DType::kF32, {4, 8}), b = zeros(DType::kF32, {4, 9}), w = zeros(DType::kBF16, {9});
  expect_kernel_error([&] { add_scaled(ctx, a.tensor, b.tensor); }, {"add_scaled:", "[4, 8]", "[4, 9]"});
  expect_kernel_error([&] { rms_norm(ctx, a.tensor, a.tensor, w.tensor, 1e-6f); },
                      {"rms_norm:", "w [9] bf16", "disagree on d"});
  expect_kernel_error([&] { silu_mul(ctx, a.tensor, a.tensor, b.tensor); },
                      {"silu_mul:", "gate [4, 8]", "up [4, 9]"});
  OwnedTensor ai = zeros(DType::kI32, {4, 8});
  expect_kernel_error([&] { softmax(ctx, ai.tensor); }, {"softmax:", "x [4, 8] i32"});
  expect_kernel_error([&] { scale(ctx, ai.tensor, 2.0f); }, {"scale:", "x [4, 8] i32"});
  OwnedTensor out5 = zeros(DType::kI32, {5});
  expect_kernel_error([&] { argmax(ctx, out5.tensor, a.tensor); }, {"argmax:", "out [5] i32", "4 elements"});
}

TEST(Dispatch, EmbeddingRejectsOutOfRangeIds) {
  Context ctx;
  OwnedTensor table = zeros(DType::kBF16, {10, 4}), out = zeros(DType::kF32, {2, 4}),
              ids = zeros(DType::kI32, {2});
  ids.tensor.ptr<int32_t>()[1] = 10;
  expect_kernel_error([&] { embedding(ctx, out.tensor, table.tensor, ids.tensor); },
                      {"embedding:", "id 10 at 1", "table [10, 4] bf16"});
  ids.tensor.ptr<int32_t>()[1] = -1;
  expect_kernel_error([&] { embedding(ctx, out.tensor, table.tensor, ids.tensor); }, {"embedding:", "id -1"});
  OwnedTensor out_d = zeros(DType::kF32, {2, 5});
  ids.tensor.ptr<int32_t>()[1] = 0;
  expect_kernel_error([&] { embedding(ctx, out_d.tensor, table.tensor, ids.tensor); },
                      {"embedding:", "disagree on d"});
}

TEST(Dispatch, AttentionValidatesMetadataAndBlocks) {
  Context ctx;
  OwnedTensor kc = zeros(DType::kBF16, {4, 2, 1, 8}), vc = zeros(DType::kBF16, {4, 2, 1, 8});
  OwnedTensor q = zeros(DType::kF32, {1, 2, 8}), out = zeros(DType::kF32, {1, 2, 8});
  OwnedTensor pos = zeros(DType::kI32, {1}), seq = zeros(DType::kI32, {1}), slots = zeros(DType::kI64, {1});
  OwnedTensor tables = zeros(DType::kI32, {1, 3});
  int32_t* table = tables.tensor.ptr<int32_t>();
  table[0] = 2;
  table[1] = -1;
  table[2] = 1;
  pos.tensor.ptr<int32_t>()[0] = 2;  // needs blocks 0 and 1; block 1 is unassigned
  const PagedKv cache{kc.tensor, vc.tensor};
  const AttentionMeta meta{pos.tensor, seq.tensor, tables.tensor, slots.tensor};
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, q.tensor, cache, meta, {}); },
                      {"paged_attention:", "visible block 1", "cache.k [4, 2, 1, 8] bf16"});
  // With a window of 1 only block 1 is visible: still invalid. A window of 1 at position 1 is fine.
  pos.tensor.ptr<int32_t>()[0] = 1;
  AttentionParams window1;
  window1.sliding_window = 1;
  EXPECT_NO_THROW(paged_attention(ctx, out.tensor, q.tensor, cache, meta, window1));
  pos.tensor.ptr<int32_t>()[0] = 6;
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, q.tensor, cache, meta, window1); },
                      {"paged_attention:", "position 6", "block_tables [1, 3] i32"});
  pos.tensor.ptr<int32_t>()[0] = 0;
  seq.tensor.ptr<int32_t>()[0] = 1;
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, q.tensor, cache, meta, {}); },
                      {"paged_attention:", "seq_index 1"});
  seq.tensor.ptr<int32_t>()[0] = 0;
  OwnedTensor q3 = zeros(DType::kF32, {1, 3, 8}), out3 = zeros(DType::kF32, {1, 3, 8});
  OwnedTensor kc2 = zeros(DType::kBF16, {4, 2, 2, 8}), vc2 = zeros(DType::kBF16, {4, 2, 2, 8});
  expect_kernel_error(
      [&] {
        paged_attention(ctx, out3.tensor, q3.tensor, {kc2.tensor, vc2.tensor}, meta, {});
      },
      {"paged_attention:", "q [1, 3, 8]", "n_kv_heads"});
  expect_kernel_error([&] { paged_attention(ctx, q.tensor, q.tensor, cache, meta, {}); },
                      {"paged_attention:", "alias"});
  OwnedTensor vc_f32 = zeros(DType::kF32, {4, 2, 1, 8});
  expect_kernel_error(
      [&] {
        paged_attention(ctx, out.tensor, q.tensor, {kc.tensor, vc_f32.tensor}, meta, {});
      },
      {"paged_attention:", "cache.v [4, 2, 1, 8] f32", "must match"});
}

TEST(Dispatch, KvWriteAndRopeCheckTheirInputs) {
  Context ctx;
  OwnedTensor kc = zeros(DType::kF32, {2, 4, 1, 8}), vc = zeros(DType::kF32, {2, 4, 1, 8});
  OwnedTensor k = zeros(DType::kF32, {2, 1, 8}), v = zeros(DType::kF32, {2, 1, 8}),
              slots = zeros(DType::kI64, {2});
  slots.tensor.ptr<int64_t>()[1] = 8;  // 2 blocks x 4 slots: 8 is one past the end
  expect_kernel_error(
      [&] {
        kv_write(ctx, {kc.tensor, vc.tensor}, k.tensor, v.tensor, slots.tensor);
      },
      {"kv_write:", "slot 8 of token 1"});
  OwnedTensor k16 = zeros(DType::kF32, {2, 1, 16});
  expect_kernel_error(
      [&] {
        kv_write(ctx, {kc.tensor, vc.tensor}, k16.tensor, k16.tensor, slots.tensor);
      },
      {"kv_write:", "k [2, 1, 16] f32", "head_dim"});
  OwnedTensor pos = zeros(DType::kI32, {2});
  float inv_freq[4] = {1, 1, 1, 1};
  expect_kernel_error(
      [&] {
        rope(ctx, k.tensor, pos.tensor, RopeParams{inv_freq, 10, 1.0f});
      },
      {"rope:", "rotary_dim 10"});
  expect_kernel_error(
      [&] {
        rope(ctx, k.tensor, pos.tensor, RopeParams{inv_freq, 3, 1.0f});
      },
      {"rope:", "rotary_dim 3"});
  OwnedTensor pos3 = zeros(DType::kI32, {3});
  expect_kernel_error(
      [&] {
        rope(ctx, k.tensor, pos3.tensor, RopeParams{inv_freq, 8, 1.0f});
      },
      {"rope:", "positions [3] i32"});
}

TEST(Dispatch, CudaTensorsAreRejected) {
  Context ctx;
  OwnedTensor x = zeros(DType::kF32, {2, 4});
  Tensor xg = x.tensor;
  xg.device = Device::cuda(0);
#ifdef BUNSEN_HAVE_CUDA
  // With the backend built, CUDA tensors are validated (with the CUDA dtype rules) before any CUDA
  // call; an i32 activation fails that check, so nothing here touches the (host) pointer.
  OwnedTensor xi = zeros(DType::kI32, {2, 4});
  xg = xi.tensor;
  xg.device = Device::cuda(0);
  const char* why = "must be f32 or bf16";
#else
  const char* why = "CUDA backend not built";
#endif
  expect_kernel_error([&] { scale(ctx, xg, 2.0f); }, {"scale:", why});
  expect_kernel_error([&] { softmax(ctx, xg); }, {"softmax:", why});
  expect_kernel_error([&] { add_scaled(ctx, x.tensor, xg); }, {"add_scaled:", "different devices"});
}

TEST(Dispatch, BackendNameFollowsIsaLevel) {
  const char* env = std::getenv("BUNSEN_KERNELS");
  if (env != nullptr && std::string(env) == "ref") {
    EXPECT_STREQ(cpu_backend_name(), "ref");
    return;
  }
  for_each_isa([](cpu::Isa isa) { EXPECT_STREQ(cpu_backend_name(), cpu::isa_name(isa)); });
  EXPECT_STREQ(cpu_backend_name(), cpu::isa_name(cpu::detected_isa()));
  if (!cpu::isa_supported(cpu::Isa::kAvx512))
    expect_kernel_error([] { cpu::set_isa_for_testing(cpu::Isa::kAvx512); }, {"cpu-avx512", "not supported"});
}

}  // namespace
}  // namespace bunsen::kernels::test
