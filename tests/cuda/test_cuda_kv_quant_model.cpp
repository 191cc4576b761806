// The quantized KV cache end to end on CUDA, over every golden fixture (bf16 weights and activations):
// teacher-forced argmax (every prompt position, then every decode step fed the golden greedy tokens)
// with --kv-quant 8 agrees with the bf16-KV run on >= 98 % of the positions of all fixtures (the issue's
// bar); int4 and fp8 are run and printed, with only a sanity floor (>= 50 %: a broken kernel gives
// chance agreement, ~1 / vocab). Also: the runner really holds a quantized cache of the asked format.
#include <cstdio>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "engine/generator.h"
#include "golden_cuda_util.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

struct Mode {
  const char* name;
  kv::KvQuantSpec spec;  // bits 0: the bf16 baseline
  double min_agreement;
};

// Argmax of every prompt row and every teacher-forced decode row.
std::vector<int32_t> argmaxes(engine::Runner& runner, const std::vector<int32_t>& ids,
                              const std::vector<int32_t>& greedy) {
  const int64_t vocab = runner.model().config().vocab_size;
  std::vector<float> rows = engine::score(runner, ids);
  const std::vector<float> dec = decode_logits(runner, ids, greedy);
  rows.insert(rows.end(), dec.begin(), dec.end());
  std::vector<int32_t> out;
  for (size_t r = 0; r * static_cast<size_t>(vocab) < rows.size(); ++r)
    out.push_back(argmax(rows.data() + r * static_cast<size_t>(vocab), vocab));
  return out;
}

TEST_F(CudaTest, QuantizedKvArgmaxAgreesWithBf16KvOnGoldenFixtures) {
  const Mode modes[] = {{"int8 g64", {8, 64, false}, 0.98}, {"int4 g64", {4, 64, false}, 0.50},
                        {"fp8 e4m3", {8, 0, true}, 0.50}};
  Tally tally[3];
  for (const std::string& name : fixture_names()) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda_kvq"), Device::cuda(0));
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size());
    const engine::RunnerOptions base = runner_options(T, static_cast<int64_t>(greedy.size()) + 8);
    std::vector<int32_t> want;
    {
      engine::Runner r(*m, base);
      ASSERT_FALSE(r.storage().quantized());
      want = argmaxes(r, ids, greedy);
    }
    std::printf("[ cuda kvq ] %-20s", name.c_str());
    for (int i = 0; i < 3; ++i) {
      engine::RunnerOptions o = base;
      o.kv_quant.assign(m->kv_layout().size(), modes[i].spec);
      engine::Runner r(*m, o);
      bool any = false;
      for (const kv::KvLayerView& l : r.storage().layers()) {
        if (l.bits == 0) continue;
        any = true;
        EXPECT_EQ(l.bits, modes[i].spec.bits) << modes[i].name;
        EXPECT_EQ(l.fp8, modes[i].spec.fp8) << modes[i].name;
      }
      EXPECT_EQ(any, !r.storage().layers().empty()) << modes[i].name << ": every attention layer is quantized";
      const std::vector<int32_t> got = argmaxes(r, ids, greedy);
      ASSERT_EQ(got.size(), want.size());
      int64_t agree = 0;
      for (size_t j = 0; j < got.size(); ++j) agree += got[j] == want[j];
      tally[i].agree += agree;
      tally[i].total += static_cast<int64_t>(got.size());
      std::printf("  %s %lld/%lld", modes[i].name, (long long)agree, (long long)got.size());
    }
    std::printf("\n");
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_GT(tally[i].total, 0);
    const double rate = static_cast<double>(tally[i].agree) / static_cast<double>(tally[i].total);
    std::printf("[ cuda kvq ] %s: teacher-forced argmax agreement with bf16 KV %.4f (%lld/%lld)\n", modes[i].name,
                rate, (long long)tally[i].agree, (long long)tally[i].total);
    EXPECT_GE(rate, modes[i].min_agreement) << modes[i].name;
  }
}

}  // namespace
}  // namespace bunsen::golden
