// Random MLX affine-quantized weights of a real shape for `bunsen benchmark --synthetic SHAPE --quant B[:G]`:
// every module the config quantizes (all Linears, the embedding and lm_head, as mlx-lm's convert does) gets
// random packed codes and plausible bf16 scales/biases built directly (no f32 weights, no quantizer), so an
// 8B shape builds in seconds on a many-core host. Not a quantizer and not golden data: only the bytes per
// token and the kernels' work are realistic; stacked MoE experts become MLX's quantized switch_mlp modules.
// Invariants: deterministic per (name, seed); the weights of a module span about [-r, r] with r its
// synthetic_scale, centred at 0 (bias = -scale * (2^bits - 1) / 2).
#include <optional>
#include <string>
#include <vector>

#include "bench/synthetic_shapes.h"
#include "core/thread_pool.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::bench {
namespace {

constexpr int64_t kGrainRows = 64;

// One quantized module: PREFIX.weight u32 [rows, cols * bits / 32], PREFIX.scales / .biases bf16.
// `stack` > 0: the module holds `stack` stacked matrices (an MLX SwitchLinear: [stack, rows / stack, ...]).
void add_quant_module(model::WeightStore& ws, const std::string& prefix, int64_t rows, int64_t cols,
                      model::QuantSpec spec, float range, uint64_t seed, int64_t stack = 0) {
  const int64_t words = model::packed_cols(cols, spec.bits), groups = model::group_cols(cols, spec.group_size);
  OwnedTensor packed = OwnedTensor::make(DType::kU32, {rows, words});
  OwnedTensor scales = OwnedTensor::make(DType::kBF16, {rows, groups});
  OwnedTensor biases = OwnedTensor::make(DType::kBF16, {rows, groups});
  const uint64_t key = model::synthetic_key(prefix, seed);
  const float levels = static_cast<float>((1 << spec.bits) - 1);
  uint32_t* p = packed.tensor.ptr<uint32_t>();
  uint16_t* s = scales.tensor.ptr<uint16_t>();
  uint16_t* b = biases.tensor.ptr<uint16_t>();
  ThreadPool::global().parallel_for(rows, kGrainRows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t w = 0; w < words; w += 2) {  // two random words per splitmix64 draw
        const uint64_t h = model::splitmix64(key + static_cast<uint64_t>(r * words + w));
        p[r * words + w] = static_cast<uint32_t>(h);
        if (w + 1 < words) p[r * words + w + 1] = static_cast<uint32_t>(h >> 32);
      }
      for (int64_t g = 0; g < groups; ++g) {
        const uint64_t h = model::splitmix64(~key + static_cast<uint64_t>(r * groups + g));
        const float jitter = 0.75f + 0.5f * static_cast<float>(h >> 40) / 16777216.0f;  // [0.75, 1.25)
        const float scale = 2.0f * range * jitter / levels;
        s[r * groups + g] = f32_to_bf16(scale);
        b[r * groups + g] = f32_to_bf16(-scale * levels / 2.0f);
      }
    }
  });
  if (stack > 0)
    for (OwnedTensor* t : {&packed, &scales, &biases})
      t->tensor = t->tensor.reshape({stack, rows / stack, t->tensor.shape[1]});
  ws.add(prefix + ".weight", std::move(packed));
  ws.add(prefix + ".scales", std::move(scales));
  ws.add(prefix + ".biases", std::move(biases));
}

// Stacked MoE experts (model/moe.h) of the transformers 5.x layout, P.experts.gate_up_proj [E, 2F, D] and
// P.experts.down_proj [E, D, F], become the quantized MLX layout P.switch_mlp.{gate,up,down}_proj
// (P.experts.switch_glu.* for Gemma 4).
bool add_quant_experts(model::WeightStore& ws, const model::ModelConfig& cfg, const model::TensorSpec& t,
                       uint64_t seed) {
  const std::string gu = ".experts.gate_up_proj", dn = ".experts.down_proj";
  const bool is_gu = t.name.ends_with(gu), is_dn = t.name.ends_with(dn);
  if (t.shape.size() != 3 || !(is_gu || is_dn)) return false;
  // mlx-lm's names: Gemma 4 keeps the HF module and adds a SwitchGLU under it (experts.switch_glu), the
  // Qwen MoE families replace it with switch_mlp.
  const bool gemma4 = cfg.model_type.starts_with("gemma4");
  const std::string p = t.name.substr(0, t.name.size() - (is_gu ? gu : dn).size()) +
                        (gemma4 ? ".experts.switch_glu." : ".switch_mlp.");
  const std::optional<model::QuantSpec> spec = cfg.quant_spec(p + (is_gu ? "gate_proj" : "down_proj"));
  if (!spec) return false;
  const int64_t e = t.shape[0], rows = is_gu ? t.shape[1] / 2 : t.shape[1], cols = t.shape[2];
  const float range = model::synthetic_scale(t.name, t.shape).scale;
  const std::vector<std::string> modules =
      is_gu ? std::vector<std::string>{"gate_proj", "up_proj"} : std::vector<std::string>{"down_proj"};
  for (const std::string& m : modules) add_quant_module(ws, p + m, e * rows, cols, *spec, range, seed, e);
  return true;
}

}  // namespace

// Every tensor of cfg: quantized modules as above, the rest (norms, biases, float overrides) synthetic.
model::WeightStore synthetic_quant_weights(const model::ModelConfig& cfg, DType dtype, uint64_t seed) {
  model::WeightStore ws;
  const std::string suffix = ".weight";
  for (const auto& t : model::expected_tensors(cfg)) {
    if (add_quant_experts(ws, cfg, t, seed)) continue;
    const bool weight = t.name.size() > suffix.size() && t.name.ends_with(suffix);
    const std::string prefix = weight ? t.name.substr(0, t.name.size() - suffix.size()) : "";
    const std::optional<model::QuantSpec> spec =
        weight && t.shape.size() == 2 ? cfg.quant_spec(prefix) : std::nullopt;
    if (!spec) {
      ws.add(t.name, model::synthetic_tensor(t.name, t.shape, dtype, seed));
      continue;
    }
    const float range = model::synthetic_scale(t.name, t.shape).scale;
    add_quant_module(ws, prefix, t.shape[0], t.shape[1], *spec, range, seed);
  }
  return ws;
}

}  // namespace bunsen::bench
