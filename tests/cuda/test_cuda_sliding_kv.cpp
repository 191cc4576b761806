// Sliding-window block space on CUDA (gemma3_text and gemma4_text fixtures, window 8, bf16 weights on the
// GPU, block size 4): requests decoded far past the window through an Engine whose Runner releases the
// sliding layers' out-of-window blocks answer bit for bit like the same Engine over a Runner that keeps
// full-length KV (same batch, same schedule, CUDA graphs on): released table entries point at valid
// blocks the window mask never lets a query see, so the attention kernels read exactly the same keys.
// Skips without a GPU.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

constexpr int64_t kGen = 40;

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  bool finished = false;
};

std::vector<Answer> run_all(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<Answer> out(prompts.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = kGen;
    r.sampling.temperature = 0.0f;
    r.top_logprobs = 1;  // full logits: logprobs compare the whole forward
    r.ignore_eos = true;
    e.submit(std::move(r), [&, i](engine::EngineEvent&& ev) {
      std::lock_guard<std::mutex> lk(mu);
      if (ev.kind == engine::EngineEvent::Kind::kTokens)
        for (const auto& t : ev.tokens) {
          out[i].tokens.push_back(t.token);
          out[i].logprobs.push_back(t.logprob);
        }
      if (ev.kind == engine::EngineEvent::Kind::kFinish || ev.kind == engine::EngineEvent::Kind::kError) {
        out[i].finished = ev.kind == engine::EngineEvent::Kind::kFinish;
        ++done;
        cv.notify_all();
      }
    });
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == prompts.size(); });
  EXPECT_EQ(done, prompts.size());
  return out;
}

std::vector<Answer> answers(model::Model& m, bool sliding, const std::vector<std::vector<int32_t>>& prompts) {
  engine::RunnerOptions ro;
  ro.max_context = 128;
  ro.max_tokens_per_step = 16;  // prompts span several prefill chunks
  ro.max_seqs = 4;
  ro.max_logit_rows = 4;
  ro.block_size = 4;
  ro.sliding_kv = sliding;
  engine::Runner runner(m, ro);
  EXPECT_EQ(runner.has_sliding_space(), sliding);
  engine::EngineOptions eo;
  eo.max_batch = 4;
  eo.max_num_batched_tokens = 16;
  eo.prefix_cache = false;
  engine::Engine e(runner, eo);
  std::vector<Answer> out = run_all(e, prompts);
  const engine::EngineStats st = e.stats();
  if (sliding) {
    EXPECT_EQ(st.kv_sliding_blocks_free, st.kv_sliding_blocks_total) << "sliding blocks leaked";
  }
  e.shutdown();
  return out;
}

class CudaSlidingKv : public CudaTest, public testing::WithParamInterface<std::string> {};

TEST_P(CudaSlidingKv, ReleaseEqualsFullLengthKv) {
  Fixture f = load_fixture(GetParam());
  model::LoadOptions lo;
  lo.device = Device::cuda(0);
  lo.progress = model::LoadOptions::Progress::kOff;
  auto m = model::load_model(build_checkpoint(f, DType::kBF16, "cuda_sliding"), lo);
  ASSERT_GT(engine::sliding_space_window(m->kv_layout()), 0);
  const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  const int64_t vocab = m->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(ids.begin(), ids.end());
    for (int j = 0; j < 5 * i; ++j) p.push_back(static_cast<int32_t>((i * 131 + j * 17 + 3) % vocab));
    prompts.push_back(std::move(p));
  }
  const std::vector<Answer> full = answers(*m, false, prompts);
  const std::vector<Answer> released = answers(*m, true, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(full[i].finished && released[i].finished) << "request " << i;
    ASSERT_EQ(released[i].tokens, full[i].tokens) << "request " << i;
    ASSERT_EQ(released[i].logprobs.size(), full[i].logprobs.size());
    for (size_t t = 0; t < full[i].logprobs.size(); ++t)
      EXPECT_EQ(std::memcmp(&released[i].logprobs[t], &full[i].logprobs[t], sizeof(float)), 0)
          << "request " << i << " token " << t << ": " << released[i].logprobs[t] << " vs " << full[i].logprobs[t];
  }
}

INSTANTIATE_TEST_SUITE_P(Gemma, CudaSlidingKv, testing::Values("gemma3_text", "gemma4_text", "gemma2"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace bunsen::golden
