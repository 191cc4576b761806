// Memory-fit and bandwidth arithmetic of `bunsen fit` (see fit.h).
#include "bench/fit.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "model/registry.h"

namespace bunsen::bench {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

bool is_embedding(const std::string& name) { return name.rfind("model.embed_tokens.", 0) == 0; }
bool is_lm_head(const std::string& name) { return name.rfind("lm_head.", 0) == 0; }

// Manifest of a llama-like block stack, for families the registry does not know (config-only inputs).
std::vector<std::pair<std::string, uint64_t>> generic_elements(const model::ModelConfig& c) {
  const uint64_t d = c.d_model, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim, f = c.d_ff;
  std::vector<std::pair<std::string, uint64_t>> t = {{"model.embed_tokens.weight", c.vocab_size * d},
                                                      {"model.norm.weight", d}};
  if (!c.tie_word_embeddings) t.emplace_back("lm_head.weight", c.vocab_size * d);
  const uint64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d + (c.qk_norm ? 2 * c.head_dim : 0) +
                             (c.attention_bias ? q + 2 * kv : 0);
  t.emplace_back("model.layers.*", per_layer * c.n_layers);
  return t;
}

void copy_shape(FitModel& m, const model::ModelConfig& c, const std::string& name) {
  m.name = name;
  m.n_layers = c.n_layers;
  m.n_kv_heads = c.n_kv_heads;
  m.head_dim = c.head_dim;
  m.d_model = c.d_model;
  m.n_heads = c.n_heads;
  m.d_ff = c.d_ff;
  m.vocab_size = c.vocab_size;
  m.max_position = c.max_position_embeddings;
  try {
    m.n_kv_layers = 0;
    const std::vector<model::KvLayerSpec> layout = model::kv_layout_from_config(c);
    bool full = false, sliding = false;  // owned layers of each kind: a mix gets a sliding block space
    for (const model::KvLayerSpec& l : layout)
      if (!l.is_linear() && l.shares_kv_with < 0) (l.sliding_window > 0 ? sliding : full) = true;
    for (const model::KvLayerSpec& l : layout) {
      if (l.is_linear()) {
        m.state_bytes_per_seq += l.state_bytes();
      } else if (l.shares_kv_with < 0) {  // KV-shared layers (Gemma 4) read another layer's cache
        ++m.n_kv_layers;
        const auto row = static_cast<uint64_t>(l.n_kv_heads * l.head_dim);
        if (full && sliding && l.sliding_window > 0) {
          m.swa_row_elems += row;
          m.swa_window = std::max<int64_t>(m.swa_window, l.sliding_window);
        } else {
          m.kv_row_elems += row;
        }
      }
    }
  } catch (const Error&) {  // a config the family parser rejects: count every layer as attention
    m.n_kv_layers = -1;
    m.state_bytes_per_seq = 0;
    m.kv_row_elems = 0;
    m.swa_row_elems = 0;
    m.swa_window = 0;
  }
}

// Total bytes and bytes read per decoded token: an untied embedding table is read one row at a time.
void sum_tensors(FitModel& m, const std::vector<std::pair<std::string, uint64_t>>& tensors) {
  bool untied = false;
  uint64_t embed = 0;
  for (const auto& [name, bytes] : tensors) {
    m.weight_bytes += bytes;
    if (is_embedding(name)) embed += bytes;
    if (is_lm_head(name)) untied = true;
  }
  m.weight_read_bytes = m.weight_bytes;
  if (untied && embed > 0 && m.vocab_size > 0)
    m.weight_read_bytes = m.weight_bytes - embed + embed / static_cast<uint64_t>(m.vocab_size);
}

}  // namespace

FitModel fit_model_from_config(const model::ModelConfig& cfg, DType weight_dtype, const std::string& name) {
  FitModel m;
  copy_shape(m, cfg, name);
  std::vector<std::pair<std::string, uint64_t>> elements;
  try {
    for (const model::TensorSpec& s : model::expected_tensors(cfg)) {
      uint64_t n = 1;
      for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
      elements.emplace_back(s.name, n);
    }
  } catch (const Error&) {  // a family bunsen cannot run yet: count a llama-like stack
    elements = generic_elements(cfg);
  }
  std::vector<std::pair<std::string, uint64_t>> bytes;
  for (const auto& [n, count] : elements) {
    m.params += count;
    bytes.emplace_back(n, count * dtype_size(weight_dtype));
  }
  sum_tensors(m, bytes);
  m.weight_source = std::string("shape (") + dtype_name(weight_dtype) + ")";
  return m;
}

FitModel fit_model_from_tensors(const model::ModelConfig& cfg, const std::vector<std::pair<std::string, uint64_t>>& tensors,
                                const std::string& name) {
  FitModel m;
  copy_shape(m, cfg, name);
  sum_tensors(m, tensors);
  m.weight_source = "safetensors";
  return m;
}

uint64_t kv_bytes_per_token(const FitModel& m, DType kv_dtype) {
  if (m.kv_row_elems > 0) return 2 * m.kv_row_elems * dtype_size(kv_dtype);  // per-layer KV shapes
  const int64_t layers = m.n_kv_layers >= 0 ? m.n_kv_layers : m.n_layers;
  return 2 * static_cast<uint64_t>(layers) * static_cast<uint64_t>(m.n_kv_heads) *
         static_cast<uint64_t>(m.head_dim) * dtype_size(kv_dtype);
}

uint64_t sliding_kv_bytes_per_token(const FitModel& m, DType kv_dtype) {
  return 2 * m.swa_row_elems * dtype_size(kv_dtype);
}

uint64_t workspace_bytes(const FitModel& m, const WorkspaceParams& p) {
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(p.step_tokens, 1));
  const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(p.max_seqs, 1));
  const uint64_t d = m.d_model, q = m.n_heads * m.head_dim, kv = m.n_kv_heads * m.head_dim, f = m.d_ff;
  const uint64_t f32 = dtype_size(DType::kF32), act = dtype_size(p.act_dtype);
  // residual x f32; h, q, k, v, attn, proj, gate, up, act in act_dtype; per logits row: xo and logits f32
  const uint64_t per_token = d * f32 + (2 * d + 2 * q + 2 * kv + 3 * f) * act;
  const uint64_t per_row = (d + static_cast<uint64_t>(m.vocab_size)) * f32;
  return n * per_token + rows * per_row + p.reserve_bytes;
}

std::vector<FitTarget> datasheet_gpus() {
  struct Sku {
    const char* name;
    double tbps;
    uint64_t gib;
  };
  constexpr Sku kSkus[] = {{"H100 SXM", 3.35, 80}, {"H200", 4.8, 141},     {"A100 80GB", 2.04, 80},
                           {"L40S", 0.864, 48},    {"RTX 4090", 1.008, 24}, {"RTX 5090", 1.792, 32}};
  std::vector<FitTarget> out;
  for (const Sku& s : kSkus) {
    FitTarget t;
    t.name = s.name;
    t.gpu = true;
    t.total_bytes = t.free_bytes = s.gib * kGiB;
    t.budget_fraction = kGpuBudgetFraction;
    t.bandwidth_gbps = s.tbps * 1000;
    t.efficiency = kDatasheetEfficiency;
    out.push_back(t);
  }
  return out;
}

FitResult compute_fit(const FitModel& m, const FitTarget& t, const FitRequest& r) {
  check(r.ctx >= 1 && r.batch >= 1 && r.block_size >= 1, "bench", "fit: ctx, batch and block_size must be >= 1");
  FitResult f;
  f.target = t.name;
  f.gpu = t.gpu;
  f.kv_dtype = t.gpu ? DType::kBF16 : DType::kF32;
  f.total_bytes = t.total_bytes;
  f.budget_bytes = static_cast<uint64_t>(std::floor(static_cast<double>(t.free_bytes) * t.budget_fraction));
  f.weight_bytes = m.weight_bytes;
  WorkspaceParams wp;
  wp.step_tokens = r.step_tokens > 0 ? r.step_tokens : (t.gpu ? kGpuStepTokens : kCpuStepTokens);
  wp.max_seqs = r.batch;
  wp.act_dtype = t.gpu ? DType::kBF16 : DType::kF32;
  wp.reserve_bytes = t.gpu ? kGpuReserveBytes : 0;
  f.workspace_bytes = workspace_bytes(m, wp);
  f.kv_bytes_per_token = kv_bytes_per_token(m, f.kv_dtype);
  const uint64_t fixed = f.weight_bytes + f.workspace_bytes;
  f.weights_fit = fixed <= f.budget_bytes;
  f.kv_budget_bytes = f.weights_fit ? f.budget_bytes - fixed : 0;
  const uint64_t block_bytes = f.kv_bytes_per_token * static_cast<uint64_t>(r.block_size);
  const auto blocks_of = [&](int64_t tokens) { return static_cast<uint64_t>((tokens + r.block_size - 1) / r.block_size); };
  // Sliding layers of a mixed model: min(ctx, window + one step's chunk) tokens per sequence, in blocks.
  const uint64_t swa_block_bytes = sliding_kv_bytes_per_token(m, f.kv_dtype) * static_cast<uint64_t>(r.block_size);
  const int64_t swa_span = m.swa_window + wp.step_tokens;
  f.sliding_kv_bytes_per_seq = blocks_of(std::min(r.ctx, swa_span)) * swa_block_bytes;
  // A sequence's cost: its KV blocks plus (hybrid models) its linear-attention state slot.
  const uint64_t state = m.state_bytes_per_seq;
  f.state_bytes_per_seq = state;
  const uint64_t fixed_per_seq = state + blocks_of(swa_span) * swa_block_bytes;  // the longest sequence's
  const uint64_t one_seq_budget = f.kv_budget_bytes > fixed_per_seq ? f.kv_budget_bytes - fixed_per_seq : 0;
  const uint64_t n_blocks = block_bytes ? one_seq_budget / block_bytes : 0;
  f.max_context = static_cast<int64_t>(n_blocks) * r.block_size;
  if (m.max_position > 0) f.max_context = std::min(f.max_context, m.max_position);
  const uint64_t seq_bytes = blocks_of(r.ctx) * block_bytes + f.sliding_kv_bytes_per_seq + state;
  f.concurrent_seqs = seq_bytes ? static_cast<int64_t>(f.kv_budget_bytes / seq_bytes) : 0;
  f.fits = f.weights_fit && f.concurrent_seqs >= 1;
  f.batch_fits = f.weights_fit && f.concurrent_seqs >= r.batch;
  f.bandwidth_gbps = t.bandwidth_gbps;
  f.efficiency = t.efficiency;
  f.bytes_per_token = static_cast<double>(m.weight_read_bytes) +
                      static_cast<double>(f.kv_bytes_per_token) * static_cast<double>(r.ctx) +
                      static_cast<double>(sliding_kv_bytes_per_token(m, f.kv_dtype)) *
                          static_cast<double>(std::min(r.ctx, m.swa_window)) +  // decode reads the window
                      static_cast<double>(state);  // the state is read (and written) once per token
  if (t.bandwidth_gbps > 0 && f.bytes_per_token > 0)
    f.decode_tok_s = t.bandwidth_gbps * 1e9 * t.efficiency / f.bytes_per_token;
  return f;
}

}  // namespace bunsen::bench
