// The RAM and SSD tiers of the prefix cache for a runner with a sliding-window block space (tiny Gemma 3,
// window 8, block size 4, on the CPU): a long prompt evicted from small device pools comes back from RAM
// (full-space blocks and the sliding blocks of the hit's window), a fresh engine on the same SSD directory
// restores both spaces from a version-2 snapshot; hits are reported and every answer equals an engine with
// no cache and no sliding space, bit for bit. A snapshot of the same model without a sliding space (a
// version-1 file, other tensor order) is a clean miss, not a quarantine.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../../support/scratch_dir.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;
constexpr int32_t kBlock = 4;

std::unique_ptr<model::Model> tiny_gemma3() {
  auto cfg = model::parse_config(R"({"model_type":"gemma3_text","vocab_size":301,"hidden_size":32,
    "intermediate_size":48,"num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,
    "query_pre_attn_scalar":16,"rms_norm_eps":1e-6,"sliding_window":8,"max_position_embeddings":256,
    "layer_types":["sliding_attention","sliding_attention","full_attention","sliding_attention"],
    "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"tie_word_embeddings":true})", "tiny gemma3");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg))
    ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, 21));
  return model::create_model(cfg, std::move(ws));
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  Usage usage;
};

Result run(Engine& e, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 2;  // full-logits path: logprobs compare the whole forward
  r.ignore_eos = true;
  Collector c;
  e.submit(std::move(r), c.sink());
  EXPECT_TRUE(c.wait());
  c.expect_one_terminal();
  Result out;
  for (const TokenOut& t : c.token_outs()) {
    out.tokens.push_back(t.token);
    out.logprobs.push_back(t.logprob);
  }
  EXPECT_EQ(c.last().kind, EngineEvent::Kind::kFinish);
  out.usage = c.last().usage;
  return out;
}

void expect_bitwise_equal(const Result& got, const Result& want) {
  ASSERT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i)
    EXPECT_EQ(std::memcmp(&got.logprobs[i], &want.logprobs[i], sizeof(float)), 0)
        << "logprob " << i << ": " << got.logprobs[i] << " vs " << want.logprobs[i];
}

// Engine options of every engine here: one sequence at a time, 16-token steps.
EngineOptions engine_opts(bool prefix_cache = true) {
  EngineOptions o;
  o.max_batch = 1;
  o.max_num_batched_tokens = 16;
  o.prefix_cache = prefix_cache;
  return o;
}

// The answer of an engine without any cache and without a sliding space (full-length KV for every layer).
Result reference(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto m = tiny_gemma3();
  Runner r(*m, runner_opts(1, 16, 0, kBlock), cpu_ctx());
  EXPECT_FALSE(r.has_sliding_space());
  Engine e(r, engine_opts(/*prefix_cache=*/false));
  return run(e, prompt, max_tokens);
}

// A sliding runner: n_blocks full-space blocks (0: sized from the context), n_sliding sliding ones.
RunnerOptions sliding_runner(int32_t n_blocks, int32_t n_sliding, bool sliding = true) {
  RunnerOptions o = runner_opts(1, 16, n_blocks, kBlock);
  o.sliding_kv = sliding;
  o.n_sliding_blocks = n_sliding;
  return o;
}

TEST(EngineSlidingTiers, RamTierRestoresBothSpacesBitForBit) {
  const std::vector<int32_t> a = make_prompt(1, 40);
  // Shares a's first 6 blocks, then differs: a hit in the middle of a, whose window a released early.
  const std::vector<int32_t> a_mid = concat(std::vector<int32_t>(a.begin(), a.begin() + 24), make_prompt(7, 11));
  const Result want_a = reference(a, 4), want_mid = reference(a_mid, 4);

  auto m = tiny_gemma3();
  Runner runner(*m, sliding_runner(/*n_blocks=*/20, /*n_sliding=*/8), cpu_ctx());
  ASSERT_TRUE(runner.has_sliding_space());
  EngineOptions o = engine_opts();
  o.ram_cache_bytes = 8u << 20;
  Engine e(runner, o);
  const Result first = run(e, a, 4);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  expect_bitwise_equal(first, want_a);
  for (int i = 2; i < 5; ++i) run(e, make_prompt(i, 40), 4);  // evict a from both device pools
  const EngineStats before = e.stats();
  EXPECT_TRUE(before.ram_cache_enabled);
  EXPECT_GT(before.ram_cache_stores, 0) << "the small full pool evicted cached blocks into RAM";
  EXPECT_GT(before.ram_cache_sliding_capacity_blocks, 0);
  EXPECT_GT(before.ram_cache_sliding_stores, 0) << "the small sliding pool evicted cached blocks into RAM";
  EXPECT_EQ(before.ram_cache_hits, 0);

  const Result again = run(e, a, 4);
  EXPECT_EQ(again.usage.cached_tokens, (40 - 1) / kBlock * kBlock);  // the last token always runs
  expect_bitwise_equal(again, want_a);
  const EngineStats after = e.stats();
  EXPECT_EQ(after.ram_cache_hits, 1);
  EXPECT_GT(after.ram_cache_hit_tokens, 0);
  EXPECT_GT(after.ram_cache_sliding_hit_tokens, 0) << "the window of the hit came back from RAM";
  EXPECT_LE(after.ram_cache_sliding_hit_tokens, (8 / kBlock + 1) * kBlock) << "only the window's blocks";

  for (int i = 5; i < 8; ++i) run(e, make_prompt(i, 40), 4);  // evict a again
  const Result mid = run(e, a_mid, 4);
  EXPECT_EQ(mid.usage.cached_tokens, 24);
  expect_bitwise_equal(mid, want_mid);
  EXPECT_EQ(e.stats().ram_cache_hits, 2);
  const EngineStats end = e.stats();
  EXPECT_EQ(end.kv_blocks_free, end.kv_blocks_total) << "nothing leaked";
  EXPECT_EQ(end.kv_sliding_blocks_free, end.kv_sliding_blocks_total);
  e.shutdown();
}

uint32_t file_version(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(8);
  uint32_t v = 0;
  f.read(reinterpret_cast<char*>(&v), 4);
  return v;
}

struct Fresh {
  Result result;
  EngineStats stats;  // after the engine shut down (its snapshots written)
};

// One request on a fresh model, runner and engine over `dir` (an empty device cache), then shutdown.
Fresh run_fresh(const std::vector<int32_t>& prompt, int64_t max_tokens, const fs::path& dir, bool sliding = true) {
  auto m = tiny_gemma3();
  Runner runner(*m, sliding_runner(0, 0, sliding), cpu_ctx());
  EXPECT_EQ(runner.has_sliding_space(), sliding);
  EngineOptions o = engine_opts();
  o.ssd_cache_dir = dir.string();
  o.ssd_cache_verify = true;
  Engine e(runner, o);
  Fresh f;
  f.result = run(e, prompt, max_tokens);
  e.shutdown();
  f.stats = e.stats();
  return f;
}

TEST(EngineSlidingTiers, SsdTierRestoresBothSpacesAfterARestart) {
  ScratchDir dir("bunsen_engine_test");
  const std::vector<int32_t> prompt = make_prompt(3, 23);
  const Result want = reference(prompt, 6);
  const Fresh first = run_fresh(prompt, 6, dir.path());
  EXPECT_EQ(first.result.usage.cached_tokens, 0);
  expect_bitwise_equal(first.result, want);
  EXPECT_TRUE(first.stats.ssd_cache_enabled);
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) EXPECT_EQ(file_version(f), 2u) << f << ": snapshots with sliding blocks";

  const Fresh again = run_fresh(prompt, 6, dir.path());  // new engine, empty pools, same directory
  EXPECT_EQ(again.result.usage.cached_tokens, (23 - 1) / kBlock * kBlock);
  expect_bitwise_equal(again.result, want);
  EXPECT_EQ(again.stats.ssd_cache_hits, 1);
  EXPECT_EQ(again.stats.ssd_cache_quarantined, 0);

  // The next turn of the conversation hits the snapshot of prompt + output (23 + 6 - 1 = 28 computed).
  const std::vector<int32_t> turn2 = concat(concat(prompt, first.result.tokens), make_prompt(9, 6));
  const Result want2 = reference(turn2, 5);
  const Fresh second = run_fresh(turn2, 5, dir.path());
  EXPECT_EQ(second.result.usage.cached_tokens, 28 / kBlock * kBlock);
  expect_bitwise_equal(second.result, want2);
}

TEST(EngineSlidingTiers, SnapshotWithoutTheSlidingSpaceIsACleanMiss) {
  ScratchDir dir("bunsen_engine_test");
  const std::vector<int32_t> prompt = make_prompt(4, 22);
  const Result want = reference(prompt, 5);
  const Fresh plain = run_fresh(prompt, 5, dir.path(), /*sliding=*/false);  // same namespace, one KV space
  expect_bitwise_equal(plain.result, want);
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) EXPECT_EQ(file_version(f), 1u) << f << ": no sliding blocks, the old format";

  const Fresh sliding = run_fresh(prompt, 5, dir.path());
  EXPECT_EQ(sliding.result.usage.cached_tokens, 0);
  expect_bitwise_equal(sliding.result, want);
  EXPECT_EQ(sliding.stats.ssd_cache_hits, 0);
  EXPECT_EQ(sliding.stats.ssd_cache_misses, 1);
  EXPECT_EQ(sliding.stats.ssd_cache_quarantined, 0) << "a miss, not damage";

  const Fresh plain_again = run_fresh(prompt, 5, dir.path(), /*sliding=*/false);  // its own file still hits
  EXPECT_EQ(plain_again.result.usage.cached_tokens, (22 - 1) / kBlock * kBlock);
  expect_bitwise_equal(plain_again.result, want);
}

// Prompts sharing prefixes of several lengths, in a fixed shuffled order, through small device pools, a small
// RAM tier (so the sliding RAM part drops windows the full part still holds) and the SSD tier at once: every
// answer equals the uncached one whatever mix of device, RAM and disk blocks served its hit.
TEST(EngineSlidingTiers, MixedHitsFromEveryTierAreExact) {
  ScratchDir dir("bunsen_engine_test");
  std::vector<std::vector<int32_t>> prompts;
  for (int base = 0; base < 3; ++base) {
    const std::vector<int32_t> p = make_prompt(base, 40);
    for (int cut : {13, 22, 31})
      for (int tail = 0; tail < 2; ++tail)
        prompts.push_back(concat(std::vector<int32_t>(p.begin(), p.begin() + cut), make_prompt(10 + tail, 5 + base)));
  }
  std::vector<Result> want;
  for (const auto& p : prompts) want.push_back(reference(p, 3));
  auto m = tiny_gemma3();
  Runner runner(*m, sliding_runner(/*n_blocks=*/16, /*n_sliding=*/8), cpu_ctx());
  EngineOptions o = engine_opts();
  o.ram_cache_bytes = 16u << 10;  // a few dozen blocks of each space
  o.ssd_cache_dir = dir.str();
  Engine e(runner, o);
  uint32_t x = 12345;
  int64_t cached = 0;
  for (int i = 0; i < 60; ++i) {
    x = x * 1664525u + 1013904223u;
    const size_t k = (x >> 8) % prompts.size();
    const Result got = run(e, prompts[k], 3);
    ASSERT_NO_FATAL_FAILURE(expect_bitwise_equal(got, want[k])) << "request " << i << " (prompt " << k << ")";
    cached += got.usage.cached_tokens;
  }
  const EngineStats st = e.stats();
  EXPECT_GT(cached, 0);
  EXPECT_GT(st.ram_cache_hits, 0);
  EXPECT_GT(st.ram_cache_sliding_hit_tokens, 0);
  EXPECT_GT(st.ram_cache_sliding_evictions, 0) << "the sliding RAM part was full";
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total) << "nothing leaked";
  EXPECT_EQ(st.kv_sliding_blocks_free, st.kv_sliding_blocks_total);
  e.shutdown();
}

}  // namespace
}  // namespace bunsen::engine::test
