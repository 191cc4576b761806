// Runner with a quantized KV cache (RunnerOptions::kv_quant): the storage is quantized per layer as asked,
// two sequences stepped together (prefill chunks, then batched decode) give the same logits as each one
// run alone (int8, int4, fp8), and the quantized logits stay close to the f32-KV ones (and differ from
// them: the codes are used);
// an Engine over a quantized runner reuses prefix-cache blocks and gives bit-identical tokens/logprobs.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>

#include "engine/engine.h"
#include "engine/runner.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

struct Seq {
  kv::BlockTable table{4};
  std::vector<int32_t> tokens;
};

// Logits rows of every step: one prefill chunk per sequence, then `decode` batched one-token steps.
std::vector<std::vector<float>> run_seqs(Runner& r, std::vector<Seq>& seqs, int decode) {
  std::vector<std::vector<float>> out(seqs.size());
  for (Seq& s : seqs) {
    std::vector<kv::BlockId> blocks;
    EXPECT_TRUE(r.pool().allocate_n(s.table.blocks_needed(static_cast<int64_t>(s.tokens.size()) + decode), blocks));
    for (auto b : blocks) s.table.append(b);
  }
  const int64_t vocab = r.model().config().vocab_size;
  auto collect = [&](const Tensor& logits) {
    for (size_t i = 0; i < seqs.size(); ++i)
      out[i].insert(out[i].end(), logits.ptr<float>() + i * vocab, logits.ptr<float>() + (i + 1) * vocab);
  };
  std::vector<SeqChunk> chunks;
  for (Seq& s : seqs) chunks.push_back({&s.table, s.tokens.data(), static_cast<int64_t>(s.tokens.size()), 0});
  collect(r.step(chunks));
  std::vector<int32_t> next(seqs.size());
  for (int d = 0; d < decode; ++d) {
    chunks.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      next[i] = static_cast<int32_t>((7 * d + 3 * i + 1) % kVocab);
      chunks.push_back({&seqs[i].table, &next[i], 1, static_cast<int64_t>(seqs[i].tokens.size()) + d});
    }
    collect(r.step(chunks));
  }
  for (Seq& s : seqs) s.table.release_all(r.pool());
  return out;
}

// bits 9: fp8 (e4m3, one scale per token and kv head).
RunnerOptions quant_opts(int bits) {
  RunnerOptions o = runner_opts(2, 64);
  o.kv_quant.assign(2, bits == 9 ? kv::KvQuantSpec{8, 0, true} : kv::KvQuantSpec{bits, 64});
  return o;
}

TEST(RunnerKvQuant, BatchedEqualsAloneAndCloseToF32) {
  auto m = tiny_model();
  for (int bits : {8, 4, 9}) {
    Runner together(*m, quant_opts(bits), cpu_ctx());
    ASSERT_TRUE(together.storage().quantized());
    EXPECT_EQ(together.storage().layers()[0].bits, bits == 9 ? 8 : bits);
    EXPECT_EQ(together.storage().layers()[0].fp8, bits == 9);
    EXPECT_EQ(together.storage().layers()[0].group_size, 8);  // head_dim 8: 64 does not divide it
    std::vector<Seq> both(2);
    both[0].tokens = make_prompt(1, 9);
    both[1].tokens = make_prompt(2, 5);
    const auto got = run_seqs(together, both, 6);
    for (size_t i = 0; i < 2; ++i) {
      Runner alone(*m, quant_opts(bits), cpu_ctx());
      std::vector<Seq> one(1);
      one[0].tokens = both[i].tokens;
      const auto want = run_seqs(alone, one, 0);
      // The prefill row and (for both) the logits match those of the sequence run alone.
      ASSERT_GE(got[i].size(), want[0].size());
      for (size_t j = 0; j < want[0].size(); ++j) EXPECT_NEAR(got[i][j], want[0][j], 1e-5f) << bits << " seq " << i;
    }
    Runner f32(*m, runner_opts(2, 64), cpu_ctx());
    std::vector<Seq> ref(2);
    ref[0].tokens = both[0].tokens;
    ref[1].tokens = both[1].tokens;
    const auto base = run_seqs(f32, ref, 6);
    float worst = 0.0f, scale = 0.0f;
    for (size_t i = 0; i < 2; ++i)
      for (size_t j = 0; j < base[i].size(); ++j) {
        worst = std::fmax(worst, std::fabs(got[i][j] - base[i][j]));
        scale = std::fmax(scale, std::fabs(base[i][j]));
      }
    EXPECT_GT(worst, 0.0f) << bits << "-bit KV gave exactly the f32 logits: is the cache quantized?";
    EXPECT_LT(worst, (bits == 8 ? 0.02f : bits == 9 ? 0.1f : 0.2f) * scale) << bits;
  }
}

using Out = test::GreedyResult;

Out run_engine(Engine& e, const std::vector<int32_t>& prompt) { return test::run_greedy(e, prompt, 6, 2); }

TEST(RunnerKvQuant, EnginePrefixCacheReusesQuantizedBlocksBitForBit) {
  auto m = tiny_model();
  const std::vector<int32_t> prompt = make_prompt(5, 21);
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_num_batched_tokens = 16;
  Out want;
  {
    Runner r(*m, quant_opts(8), cpu_ctx());
    eo.prefix_cache = false;
    Engine e(r, eo);
    want = run_engine(e, prompt);
  }
  Runner r(*m, quant_opts(8), cpu_ctx());
  eo.prefix_cache = true;
  Engine e(r, eo);
  const Out first = run_engine(e, prompt), second = run_engine(e, prompt);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  EXPECT_GT(second.usage.cached_tokens, 0);
  for (const Out* o : {&first, &second}) {
    ASSERT_EQ(o->tokens, want.tokens);
    ASSERT_EQ(o->logprobs.size(), want.logprobs.size());
    EXPECT_EQ(std::memcmp(o->logprobs.data(), want.logprobs.data(), want.logprobs.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace bunsen::engine::test
