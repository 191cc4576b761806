// The demo model's hyper-parameters and weight seed. They equal the golden fixture "qwen3_demo"
// (scripts/golden/make_goldens.py), so the demo path is checked against transformers end to end
// (tests/cli: the demo's greedy tokens == the fixture's HF greedy tokens).
#include "hub/demo_model.h"

namespace bunsen::hub {

const char* demo_config_json() {
  return R"({
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "vocab_size": 151936,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-05,
  "max_position_embeddings": 40960,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
  "tie_word_embeddings": true,
  "attention_bias": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "dtype": "bfloat16"
}
)";
}

uint64_t demo_seed() { return 1008; }

}  // namespace bunsen::hub
