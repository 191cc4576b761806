// The forwards' prologue-norm buffer path on the CPU: with kernels::set_fused_norm_for_testing(1) every
// forward that passes its residual add + RMSNorm to the projections (model::norms_in_projections) takes the
// path the CUDA GEMV prologue uses (the residual alternating between two buffers, the norm given as a `pre`);
// on the CPU each op then runs add_rms_norm(pre) first, so the decode logits must equal the in-place path's
// bit for bit. This checks the forwards' wiring (which buffer is x when, which norm weight goes where) in CI;
// the CUDA prologue itself is checked against add_rms_norm by test_cuda's FusedNorm* tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "golden_file.h"
#include "kernels/ops.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

// Logits of the prompt (one step) and then of one single-token step per golden greedy token (teacher forced).
std::vector<float> decode_logits(engine::Runner& runner, const std::vector<int32_t>& ids,
                                 const std::vector<int32_t>& greedy) {
  const int64_t vocab = runner.model().config().vocab_size;
  kv::BlockTable table(runner.block_size());
  EXPECT_TRUE(table.acquire_state_slot(runner.pool()));  // hybrid models: the linear-attention state slot
  std::vector<kv::BlockId> blocks;
  EXPECT_TRUE(runner.pool().allocate_n(table.blocks_needed(static_cast<int64_t>(ids.size() + greedy.size())),
                                       blocks));
  for (auto b : blocks) table.append(b);
  engine::SeqChunk prefill{&table, ids.data(), static_cast<int64_t>(ids.size()), 0,
                           engine::SeqChunk::Logits::kLast};
  Tensor logits = runner.step({&prefill, 1});
  std::vector<float> out;
  for (size_t i = 0; i < greedy.size(); ++i) {
    out.insert(out.end(), logits.ptr<float>(), logits.ptr<float>() + vocab);
    engine::SeqChunk step{&table, &greedy[i], 1, static_cast<int64_t>(ids.size() + i),
                          engine::SeqChunk::Logits::kLast};
    logits = runner.step({&step, 1});
  }
  table.release_all(runner.pool());
  return out;
}

struct HookReset {
  ~HookReset() { kernels::set_fused_norm_for_testing(-1); }
};

TEST(GoldenFusedNorm, PrologueBufferPathDecodesLikeTheInPlacePathOnTheCpu) {
  HookReset reset;
  // Every fixture: the families that pass no norm to a projection (Gemma) must not change either.
  const std::vector<std::string> all = fixture_names();
  int fixtures = 0;
  for (const std::string& name : all) {
    SCOPED_TRACE(name);
    ++fixtures;
    Fixture f = load_fixture(name);
    auto m = model::load_model(build_checkpoint(f, DType::kF32, "fused_norm"));
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    greedy.resize(std::min<size_t>(greedy.size(), 12));
    const auto T = static_cast<int64_t>(ids.size());
    std::vector<float> got[2];
    for (int on : {0, 1}) {
      kernels::set_fused_norm_for_testing(on);
      EXPECT_EQ(kernels::fused_norm_enabled(), on == 1);
      engine::RunnerOptions ro;
      ro.max_context = T + static_cast<int64_t>(greedy.size()) + 4;
      ro.max_tokens_per_step = T;
      ro.max_logit_rows = T;
      ro.block_size = 4;
      engine::Runner r(*m, ro);
      got[on] = decode_logits(r, ids, greedy);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    ASSERT_FALSE(got[0].empty());
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0)
        << "the prologue buffer path and the in-place path differ";
  }
  EXPECT_GE(fixtures, 15);
}

}  // namespace
}  // namespace bunsen::golden
