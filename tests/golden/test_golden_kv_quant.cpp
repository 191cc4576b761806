// Quantized KV cache on the golden fixtures: each fixture's input_ids followed by HF's greedy tokens is
// decoded teacher-forced, one token per step through the paged cache, by a runner with an f32 KV cache and
// by runners with int8 / int4 KV (group 64, or head_dim); the argmax of every step is compared. Pooled over
// all fixtures, int8 must agree with the f32-KV argmax on >= 98 % of the steps; int4 is reported only.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/runner.h"
#include "golden_file.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

// Argmax after every token of `seq` (prefix-by-prefix decode, one token per step).
std::vector<int32_t> teacher_forced_argmax(engine::Runner& runner, const std::vector<int32_t>& seq) {
  kv::BlockTable table(runner.block_size());
  EXPECT_TRUE(table.acquire_state_slot(runner.pool()));  // hybrid models: the linear-attention state slot
  std::vector<kv::BlockId> blocks;
  EXPECT_TRUE(runner.pool().allocate_n(table.blocks_needed(static_cast<int64_t>(seq.size())), blocks));
  for (auto b : blocks) table.append(b);
  std::vector<int32_t> out;
  for (size_t i = 0; i < seq.size(); ++i) {
    engine::SeqChunk c{&table, &seq[i], 1, static_cast<int64_t>(i), engine::SeqChunk::Logits::kLast};
    out.push_back(runner.step_argmax({&c, 1})[0]);
  }
  table.release_all(runner.pool());
  return out;
}

TEST(GoldenKvQuant, Int8ArgmaxAgreesWithF32Kv) {
  int64_t steps = 0, agree8 = 0, agree4 = 0;
  for (const std::string& name : fixture_names()) {
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kF32, "kvquant");
    auto m = model::load_model(dir);
    std::vector<int32_t> seq = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    engine::RunnerOptions ro;
    ro.max_context = static_cast<int64_t>(seq.size());
    ro.block_size = 4;
    engine::Runner base(*m, ro);
    const std::vector<int32_t> want = teacher_forced_argmax(base, seq);
    int64_t a8 = 0, a4 = 0;
    for (int bits : {8, 4}) {
      ro.kv_quant.assign(static_cast<size_t>(m->config().n_layers), kv::KvQuantSpec{bits, 64});
      engine::Runner q(*m, ro);
      ASSERT_TRUE(q.storage().quantized());
      const std::vector<int32_t> got = teacher_forced_argmax(q, seq);
      int64_t& a = bits == 8 ? a8 : a4;
      for (size_t i = 0; i < got.size(); ++i) a += got[i] == want[i];
    }
    std::printf("[ kv-quant ] %-18s %3zu steps: int8 %5.1f %%, int4 %5.1f %% argmax agreement with f32 KV\n",
                name.c_str(), seq.size(), 100.0 * a8 / seq.size(), 100.0 * a4 / seq.size());
    steps += static_cast<int64_t>(seq.size());
    agree8 += a8;
    agree4 += a4;
  }
  ASSERT_GT(steps, 0);
  const double r8 = static_cast<double>(agree8) / steps, r4 = static_cast<double>(agree4) / steps;
  std::printf("[ kv-quant ] all fixtures, %lld steps: int8 %.2f %%, int4 %.2f %%\n", (long long)steps, 100 * r8,
              100 * r4);
  EXPECT_GE(r8, 0.98);
}

}  // namespace
}  // namespace bunsen::golden
