// Shared by the model tests: the logits of every token of one sequence run through Model::forward as a
// single prefill step on the CPU, with fresh f32 KV caches (one per layer, `block` tokens per block) and, for
// linear-attention layers, a fresh state slot 0. Not the Runner (no graphs, no scheduler): the plain forward.
// Also a CPU model of a golden fixture's config with synthetic weights, and a fixed prompt over its vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/config.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::model::testutil {

// The config of golden fixture `name` (tests/golden/data/<name>) with synthetic f32 weights (seed 7), on the CPU.
inline std::unique_ptr<Model> fixture_model(const std::string& name) {
  const ModelConfig cfg = load_config(std::string(BUNSEN_SOURCE_DIR) + "/tests/golden/data/" + name);
  WeightStore ws;
  for (const TensorSpec& s : expected_tensors(cfg)) ws.add(s.name, synthetic_tensor(s.name, s.shape, DType::kF32, 7));
  return create_model(cfg, std::move(ws));
}

// n token ids spread over a vocabulary of `vocab` (the same prompt every call).
inline std::vector<int32_t> spread_tokens(int32_t n, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < n; ++i) tokens.push_back((i * 37 + 5) % static_cast<int32_t>(vocab));
  return tokens;
}

inline std::vector<float> prefill_logits(Model& m, const std::vector<int32_t>& tokens, int64_t block = 16,
                                         ActivationHook* hook = nullptr) {
  const int64_t n = static_cast<int64_t>(tokens.size()), n_blocks = (n + block - 1) / block;
  std::vector<int32_t> ids(tokens), pos(tokens.size()), seq(tokens.size(), 0), rows(tokens.size());
  std::vector<int32_t> table(static_cast<size_t>(n_blocks)), starts = {0, static_cast<int32_t>(n)}, state_slots = {0};
  std::vector<int64_t> slots(tokens.size());
  for (int64_t i = 0; i < n; ++i) pos[i] = rows[i] = static_cast<int32_t>(i), slots[i] = i;
  for (int64_t b = 0; b < n_blocks; ++b) table[b] = static_cast<int32_t>(b);
  StepBatch batch;
  batch.token_ids = Tensor::view(ids.data(), DType::kI32, {n});         // [n] i32
  batch.positions = Tensor::view(pos.data(), DType::kI32, {n});         // [n] i32
  batch.seq_index = Tensor::view(seq.data(), DType::kI32, {n});         // [n] i32
  batch.slot_mapping = Tensor::view(slots.data(), DType::kI64, {n});    // [n] i64
  batch.block_tables = Tensor::view(table.data(), DType::kI32, {1, n_blocks});
  batch.logit_rows = Tensor::view(rows.data(), DType::kI32, {n});       // [n] i32
  batch.seq_starts = Tensor::view(starts.data(), DType::kI32, {2});
  batch.state_slots = Tensor::view(state_slots.data(), DType::kI32, {1});
  batch.max_seq_len = n;
  std::vector<OwnedTensor> owned;
  std::vector<kernels::PagedKv> kv;
  std::vector<kernels::LinearState> state;
  for (const KvLayerSpec& l : m.kv_layout()) {
    if (l.is_linear()) {
      owned.push_back(OwnedTensor::make(DType::kF32, {1, l.conv_channels, l.conv_len}));
      owned.push_back(OwnedTensor::make(DType::kF32, {1, l.state_heads, l.state_k, l.state_v}));
      state.push_back({owned[owned.size() - 2].tensor, owned.back().tensor});
      kv.push_back({});
    } else {
      for (int part = 0; part < 2; ++part)  // K, V: [n_blocks, block, n_kv_heads, head_dim] f32
        owned.push_back(OwnedTensor::make(DType::kF32, {n_blocks, block, l.n_kv_heads, l.head_dim}));
      kv.push_back({owned[owned.size() - 2].tensor, owned.back().tensor});
      state.push_back({});
    }
  }
  std::vector<float> logits(static_cast<size_t>(n * m.config().vocab_size));  // [n, vocab_size] f32
  Arena ws(m.workspace_bytes(n, n));
  kernels::Context ctx;
  ForwardArgs a;
  a.batch = &batch;
  a.kv = kv;
  a.state = state;
  a.workspace = &ws;
  a.logits = Tensor::view(logits.data(), DType::kF32, {n, m.config().vocab_size});
  a.ctx = &ctx;
  a.hook = hook;
  m.forward(a);
  return logits;
}

}  // namespace bunsen::model::testutil
