// RAM and SSD tiers of the prefix cache with a sliding-window block space on CUDA (gemma3_text and
// gemma4_text fixtures, block size 4, bf16 weights on the GPU): a prompt whose blocks small device pools
// evicted into pinned host RAM (2-D copies on the runner's stream), and the same prompt restored by a fresh
// engine from an SSD snapshot, answer bit for bit like the same prompt hitting the device cache with the same
// hit length: the same kernels run over the same K/V bits, so any block restored wrong (or a window block
// not restored) shows. Skips without a GPU.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "../golden/golden_file.h"
#include "../support/scratch_dir.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

constexpr int32_t kBlock = 4;
constexpr int64_t kPrompt = 40;

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t cached = -1;
  bool finished = false;
};

Answer ask(engine::Engine& e, const std::vector<int32_t>& prompt) {
  engine::EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 6;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 1;  // full logits: logprobs compare the whole forward
  r.ignore_eos = true;
  Answer out;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  e.submit(std::move(r), [&](engine::EngineEvent&& ev) {
    std::lock_guard<std::mutex> lk(mu);
    if (ev.kind == engine::EngineEvent::Kind::kTokens)
      for (const auto& t : ev.tokens) {
        out.tokens.push_back(t.token);
        out.logprobs.push_back(t.logprob);
      }
    if (ev.kind == engine::EngineEvent::Kind::kFinish || ev.kind == engine::EngineEvent::Kind::kError) {
      out.finished = ev.kind == engine::EngineEvent::Kind::kFinish;
      out.cached = ev.usage.cached_tokens;
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock<std::mutex> lk(mu);
  cv.wait_for(lk, std::chrono::seconds(120), [&] { return done; });
  EXPECT_TRUE(done && out.finished);
  return out;
}

void expect_same(const Answer& got, const Answer& want, const char* what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t t = 0; t < want.logprobs.size(); ++t)
    EXPECT_EQ(std::memcmp(&got.logprobs[t], &want.logprobs[t], sizeof(float)), 0)
        << what << " token " << t << ": " << got.logprobs[t] << " vs " << want.logprobs[t];
}

// One sequence at a time, 16-token steps, a sliding space; n_blocks / n_sliding 0: the default sizes.
engine::RunnerOptions runner_opts(int32_t n_blocks, int32_t n_sliding) {
  engine::RunnerOptions ro;
  ro.max_context = 128;
  ro.max_tokens_per_step = 16;
  ro.max_seqs = 1;
  ro.max_logit_rows = 1;
  ro.block_size = kBlock;
  ro.n_blocks = n_blocks;
  ro.sliding_kv = true;
  ro.n_sliding_blocks = n_sliding;
  return ro;
}

engine::EngineOptions engine_opts() {
  engine::EngineOptions eo;
  eo.max_batch = 1;
  eo.max_num_batched_tokens = 16;
  return eo;
}

std::vector<int32_t> prompt_of(const std::vector<int32_t>& ids, int salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t j = 0; j < kPrompt; ++j)
    p.push_back(salt == 0 && j < static_cast<int64_t>(ids.size())
                    ? ids[static_cast<size_t>(j)]
                    : static_cast<int32_t>((salt * 131 + j * 17 + 3) % vocab));
  return p;
}

class CudaSlidingTiers : public CudaTest, public testing::WithParamInterface<std::string> {};

TEST_P(CudaSlidingTiers, RamAndSsdHitsEqualADeviceHit) {
  Fixture f = load_fixture(GetParam());
  model::LoadOptions lo;
  lo.device = Device::cuda(0);
  lo.progress = model::LoadOptions::Progress::kOff;
  auto m = model::load_model(build_checkpoint(f, DType::kBF16, "cuda_sliding_tiers"), lo);
  const int64_t vocab = m->config().vocab_size;
  const std::vector<int32_t> a = prompt_of(to_i32(f.outputs->get("input_ids")), 0, vocab);
  const int64_t hit = (kPrompt - 1) / kBlock * kBlock;
  const test_support::ScratchDir dir("bunsen_cuda_sliding_tiers");

  Answer device_hit;
  {  // the reference: the second request hits the device cache (room for everything)
    engine::Runner r(*m, runner_opts(0, 0));
    ASSERT_TRUE(r.has_sliding_space());
    engine::Engine e(r, engine_opts());
    ask(e, a);
    device_hit = ask(e, a);
    EXPECT_EQ(device_hit.cached, hit);
  }
  {  // small pools: fillers evict a from both spaces into RAM; the first run of a is snapshotted to disk
    engine::Runner r(*m, runner_opts(/*n_blocks=*/20, /*n_sliding=*/8));
    engine::EngineOptions eo = engine_opts();
    eo.ram_cache_bytes = 64u << 20;
    eo.ssd_cache_dir = dir.str();
    engine::Engine e(r, eo);
    ask(e, a);
    for (int i = 1; i < 4; ++i) ask(e, prompt_of({}, i, vocab));
    const Answer ram_hit = ask(e, a);
    EXPECT_EQ(ram_hit.cached, hit);
    expect_same(ram_hit, device_hit, "RAM hit");
    const engine::EngineStats st = e.stats();
    EXPECT_EQ(st.ram_cache_hits, 1);
    EXPECT_GT(st.ram_cache_sliding_hit_tokens, 0) << "the window came back from pinned RAM";
    EXPECT_EQ(st.kv_sliding_blocks_free, st.kv_sliding_blocks_total);
    e.shutdown();  // the SSD writer drains
  }
  {  // a fresh engine on the same directory: both spaces come back from the snapshot
    engine::Runner r(*m, runner_opts(0, 0));
    engine::EngineOptions eo = engine_opts();
    eo.ssd_cache_dir = dir.str();
    engine::Engine e(r, eo);
    const Answer ssd_hit = ask(e, a);
    EXPECT_EQ(ssd_hit.cached, hit);
    expect_same(ssd_hit, device_hit, "SSD hit");
    EXPECT_EQ(e.stats().ssd_cache_hits, 1);
    e.shutdown();
  }
}

INSTANTIATE_TEST_SUITE_P(Gemma, CudaSlidingTiers, testing::Values("gemma3_text", "gemma4_text"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace bunsen::golden
