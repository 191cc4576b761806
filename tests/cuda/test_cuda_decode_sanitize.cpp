// Small-shape flash-decoding cases for compute-sanitizer (scripts/sanitize.sh runs them under memcheck and
// racecheck, where the long-context decode tests are too slow): the tensor-core kernel at head_dim
// 64/128/256/512, 8 and 16 MMA rows (groups 1, 4, 12), one and three forced slices, on the split path with
// the separate and the fused combine (merge_if_last reuses the epilogue's shared `red`) and on the
// cluster path. The lengths give every slice an odd and an even count of 16-key tiles and a stream with
// no tile (head_dim 256: the two key streams pass different numbers of exchange barriers, which the kernel
// balances). Each case is checked against kernels/ref, and the fused combine bit for bit against the
// separate one. Not a performance test.
#include <cuda_runtime.h>

#include <span>

#include "attention_test_util.h"
#include "kernels/cuda/attention_decode.cuh"

namespace bunsen::kernels::test {
namespace {

// Parameter: 0 split path + combine kernel, 1 split path + fused combine, 2 cluster path.
class CudaDecodeSanitize : public CudaTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    set_decode_switches(0, GetParam() == 2 ? 2 : 1, GetParam() == 1 ? 1 : 2, 1);
  }
  void TearDown() override {
    reset_decode_switches();
    CudaTest::TearDown();
  }
};

// Refills the output with random garbage (synchronous), so a row nobody writes cannot pass.
void refill(DeviceTensor& t, std::mt19937& rng) {
  OwnedTensor g = OwnedTensor::make(t.tensor.dtype, std::span<const int64_t>(t.tensor.shape, t.tensor.ndim));
  fill_uniform(g.tensor, rng, -9.0f, 9.0f);
  cuda::copy_to_device(t.tensor.data, g.tensor.data, g.tensor.nbytes(), nullptr);
}

// Keys per row: tiles 1 (stream 1 of head_dim 256 idle), 1 + a partial, 3 (odd), 4, 5 and 7 (odd); with 3
// slices, slices of 2 and 3 tiles.
const std::vector<int64_t> kSmallLens = {1, 16, 17, 33, 48, 64, 80, 97};

TEST_P(CudaDecodeSanitize, SmallShapesEveryHeadDimGroupAndSliceCount) {
  for (int64_t head_dim : {64, 128, 256, 512})
    for (int64_t group : {1, 4, 12})
      for (int splits : {1, 3}) {
        cuda::set_attention_splits_for_testing(splits);
        Scenario s = decode_scenario(group, head_dim, kSmallLens);
        s.out_dtype = DType::kF32;
        const std::string what =
            strfmt("head_dim %lld group %lld splits %d", (long long)head_dim, (long long)group, splits);
        std::mt19937 rng(421);
        Batch b = make_batch(s, rng);
        const OwnedTensor want = reference_out(b, s);
        DeviceBatch d = upload(b, DType::kF32, rng);
        auto run = [&](int combine) {
          refill(d.out, rng);
          if (GetParam() != 2) cuda::set_attention_decode_combine_for_testing(combine);
          paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
          return values(d.out.download().tensor);
        };
        const std::vector<float> got = run(GetParam() == 1 ? 1 : 2);
        expect_close(got, values(want.tensor), tolerance(DType::kF32, 1e-4f), what);
        if (GetParam() == 1) expect_close(run(2), got, 0.0f, what + " combine kernel equals fused");
      }
  cuda::set_attention_splits_for_testing(0);
}

// A sliding window and soft-cap at head_dim 256 (rows whose slices start past key 0), both MMA row counts.
TEST_P(CudaDecodeSanitize, WindowAndSoftcapAtHeadDim256) {
  for (int64_t group : {2, 16})
    for (int splits : {1, 3}) {
      cuda::set_attention_splits_for_testing(splits);
      Scenario s = decode_scenario(group, 256, {40, 97, 150});
      s.out_dtype = DType::kF32;
      s.params = {0.3f, 70, 5.0f, {}};
      s.release_out_of_window = true;
      check_attention(ctx_, s, strfmt("group %lld splits %d", (long long)group, splits), 422);
    }
  cuda::set_attention_splits_for_testing(0);
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaDecodeSanitize, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace bunsen::kernels::test
