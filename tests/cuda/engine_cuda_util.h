// Helpers of the CUDA engine tests that drive a real Engine over a golden fixture on the GPU
// (test_cuda_state_checkpoints.cpp, test_cuda_state_tiers.cpp): load a fixture's bf16 checkpoint onto
// device 0, and ask one greedy request and wait for its tokens and cached-token count.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../golden/golden_file.h"
#include "engine/engine.h"
#include "model/registry.h"

namespace bunsen::golden {

// The fixture's bf16 checkpoint (built once per process under the "cuda_ckpt" tag) loaded on cuda:0.
inline std::unique_ptr<model::Model> load_cuda(const std::string& fixture) {
  Fixture f = load_fixture(fixture);
  model::LoadOptions lo;
  lo.device = Device::cuda(0);
  lo.progress = model::LoadOptions::Progress::kOff;
  return model::load_model(build_checkpoint(f, DType::kBF16, "cuda_ckpt"), lo);
}

struct AskResult {
  std::vector<engine::TokenOut> tokens;
  int64_t cached = -1;  // the finish event's usage.cached_tokens; -2 after an error event
};

// Submits a greedy request (8 tokens, EOS ignored, no logprobs) and waits up to 60 s for its end.
inline AskResult ask(engine::Engine& e, const std::vector<int32_t>& prompt) {
  engine::EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  AskResult out;
  e.submit(std::move(r), [&](engine::EngineEvent&& ev) {
    std::lock_guard<std::mutex> lk(mu);
    if (ev.kind == engine::EngineEvent::Kind::kTokens) out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.kind == engine::EngineEvent::Kind::kFinish || ev.kind == engine::EngineEvent::Kind::kError) {
      out.cached = ev.kind == engine::EngineEvent::Kind::kFinish ? ev.usage.cached_tokens : -2;
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock<std::mutex> lk(mu);
  cv.wait_for(lk, std::chrono::seconds(60), [&] { return done; });
  return out;
}

}  // namespace bunsen::golden
