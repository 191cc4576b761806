// Helpers for the Engine/ReplayBackend tests: a tiny synthetic llama model, runner options, deterministic
// prompts and a thread-safe event collector that checks the one-terminal-event rule. Header only (test
// sources are globbed as *.cpp). Not a fake engine: the tests drive the real Engine on the CPU.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::engine::test {

constexpr int64_t kVocab = 301;

inline std::unique_ptr<model::Model> tiny_model(bool nan_final_norm = false) {
  auto cfg = model::parse_config(R"({"model_type":"llama","vocab_size":301,"hidden_size":32,"intermediate_size":48,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2})", "tiny");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg)) {
    OwnedTensor t = model::synthetic_tensor(s.name, s.shape, DType::kF32, 7);
    if (nan_final_norm && s.name == "model.norm.weight") {
      float* p = t.tensor.ptr<float>();
      for (int64_t i = 0; i < t.tensor.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
    }
    ws.add(s.name, std::move(t));
  }
  return model::create_model(cfg, std::move(ws));
}

// CPU kernel contexts: one thread keeps the tests fast on a loaded machine; two threads check that the
// results do not depend on how work is split across threads either.
inline kernels::Context cpu_ctx(int threads = 1) {
  static ThreadPool one(1), two(2);
  return kernels::Context{threads == 1 ? &one : &two, nullptr};
}

// Runner sized for an engine of `batch` sequences and `step_tokens` tokens per step.
inline RunnerOptions runner_opts(int64_t batch, int64_t step_tokens, int32_t n_blocks = 0, int32_t block = 4) {
  RunnerOptions o;
  o.max_context = 128;
  o.max_tokens_per_step = step_tokens;
  o.max_seqs = batch;
  o.max_logit_rows = batch;
  o.block_size = block;
  o.n_blocks = n_blocks;
  return o;
}

// The SSD tier's snapshot files (*.kvs) directly in dir.
inline std::vector<std::filesystem::path> snapshot_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kvs") out.push_back(e.path());
  return out;
}

inline std::vector<int32_t> make_prompt(int i, int n) {
  std::vector<int32_t> p;
  for (int j = 0; j < n; ++j) p.push_back(static_cast<int32_t>((i * 31 + j * 37 + 11) % kVocab));
  return p;
}

// Collects one request's events from the engine thread.
class Collector {
 public:
  EventSink sink() {
    return [this](EngineEvent&& e) {
      std::lock_guard<std::mutex> lk(mu_);
      if (e.kind == EngineEvent::Kind::kFinish || e.kind == EngineEvent::Kind::kError) ++terminal_;
      else if (terminal_ > 0) ++after_terminal_;
      events_.push_back(std::move(e));
      cv_.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return terminal_ > 0; });
  }
  // Call after wait(): exactly one terminal event, and it is the last one.
  void expect_one_terminal() {
    std::lock_guard<std::mutex> lk(mu_);
    EXPECT_EQ(terminal_, 1);
    EXPECT_EQ(after_terminal_, 0);
  }
  std::vector<EngineEvent> events() {
    std::lock_guard<std::mutex> lk(mu_);
    return events_;
  }
  EngineEvent last() {
    std::lock_guard<std::mutex> lk(mu_);
    return events_.empty() ? EngineEvent{} : events_.back();
  }
  std::vector<int32_t> tokens() {
    std::vector<int32_t> t;
    for (const TokenOut& o : token_outs()) t.push_back(o.token);
    return t;
  }
  std::vector<TokenOut> token_outs() {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<TokenOut> t;
    for (const auto& e : events_)
      if (e.kind == EngineEvent::Kind::kTokens) t.insert(t.end(), e.tokens.begin(), e.tokens.end());
    return t;
  }
  int count(EngineEvent::Kind k) {
    std::lock_guard<std::mutex> lk(mu_);
    int n = 0;
    for (const auto& e : events_) n += e.kind == k;
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineEvent> events_;
  int terminal_ = 0, after_terminal_ = 0;
};

// Polls until pred() holds (stats are refreshed at the end of each step), up to `timeout`.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}


// A greedy request (temperature 0, ignore_eos); top_logprobs > 0 puts it on the full-logits path, so the
// logprobs of two runs compare the whole forward.
inline EngineRequest greedy_request(const std::vector<int32_t>& prompt, int64_t max_tokens, int top_logprobs = 1) {
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = top_logprobs;
  r.ignore_eos = true;
  return r;
}

// One request's tokens, their logprobs and its usage.
struct GreedyResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  Usage usage;
};

inline GreedyResult result_of(Collector& c) {
  GreedyResult out;
  for (const TokenOut& t : c.token_outs()) {
    out.tokens.push_back(t.token);
    out.logprobs.push_back(t.logprob);
  }
  out.usage = c.last().usage;
  return out;
}

// Greedy requests for all prompts submitted together (batched by the engine), then waited for in order.
inline std::vector<GreedyResult> run_greedy_batch(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_tokens, int top_logprobs = 1) {
  std::vector<std::unique_ptr<Collector>> cs;
  for (const auto& p : prompts) {
    cs.push_back(std::make_unique<Collector>());
    e.submit(greedy_request(p, max_tokens, top_logprobs), cs.back()->sink());
  }
  std::vector<GreedyResult> out;
  for (auto& c : cs) {
    EXPECT_TRUE(c->wait());
    c->expect_one_terminal();
    out.push_back(result_of(*c));
  }
  return out;
}

inline GreedyResult run_greedy(Engine& e, const std::vector<int32_t>& prompt, int64_t max_tokens = 4,
                               int top_logprobs = 3) {
  return run_greedy_batch(e, {prompt}, max_tokens, top_logprobs)[0];
}

// Same tokens and bit-identical logprobs (request i of a batch, for the message).
inline void expect_same_bits(const GreedyResult& a, const GreedyResult& b, size_t i) {
  ASSERT_EQ(a.tokens, b.tokens) << "request " << i;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "request " << i;
  for (size_t t = 0; t < a.logprobs.size(); ++t)
    EXPECT_EQ(std::memcmp(&a.logprobs[t], &b.logprobs[t], sizeof(float)), 0) << "request " << i << " token " << t;
}

// A model with the config of golden fixture `name` (tests/golden/data/NAME/config.json) and synthetic f32
// weights (seed 11), on the CPU.
inline std::unique_ptr<model::Model> fixture_model(const std::string& name) {
  const std::string path = std::string(BUNSEN_SOURCE_DIR) + "/tests/golden/data/" + name + "/config.json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  auto cfg = model::parse_config(ss.str(), path);
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg))
    ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, 11));
  return model::create_model(cfg, std::move(ws));
}

struct Answer {
  std::vector<TokenOut> tokens;
  int64_t cached = -1;  // usage.cached_tokens
};

// One greedy request to completion. top_logprobs > 0 takes the full-logits path (its logprobs compare the
// whole forward); ignore_eos runs it to max_tokens.
inline Answer ask(Backend& b, const std::vector<int32_t>& prompt, int64_t max_tokens, int top_logprobs = 0,
                  bool ignore_eos = false) {
  EngineRequest e;
  e.prompt = prompt;
  e.max_tokens = max_tokens;
  e.sampling.temperature = 0.0f;
  e.top_logprobs = top_logprobs;
  e.ignore_eos = ignore_eos;
  Collector c;
  b.submit(std::move(e), c.sink());
  EXPECT_TRUE(c.wait());
  c.expect_one_terminal();
  return {c.token_outs(), c.last().usage.cached_tokens};
}

// Same tokens and bit-identical logprobs, token by token (`what` names the comparison).
inline void expect_same(const std::vector<TokenOut>& got, const std::vector<TokenOut>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_EQ(got[t].token, want[t].token) << what << " token " << t;
    EXPECT_EQ(std::memcmp(&got[t].logprob, &want[t].logprob, sizeof(float)), 0) << what << " logprob " << t;
  }
}

// a followed by b.
inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace bunsen::engine::test
