"""Gemma 2 / 3 / 4 golden fixtures (see make_goldens.py). Tiny random-weight configs that switch on every
feature the gemma arch implements: interleaved sliding/global layers with a window shorter than the prompt,
attention and final logit soft-caps, query_pre_attn_scalar != head_dim, separate local/global RoPE,
Gemma 4 per-layer input embeddings, KV-shared trailing layers, K=V full-attention layers with their own
head_dim and KV heads, proportional partial RoPE, double-wide MLP and the MoE block (gemma4_moe's seed is
chosen by routing margin: route_search, see make_goldens.py / routing.py)."""

_TANH = dict(hidden_activation="gelu_pytorch_tanh")
_DROP = dict(drop_common=("hidden_act",))

FIXTURES = {
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", 1012, dict(
        _TANH, num_hidden_layers=4, intermediate_size=128, vocab_size=1093, head_dim=16, tie_word_embeddings=True,
        query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=5.0, final_logit_softcapping=10.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), _DROP),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", 1013, dict(
        _TANH, num_hidden_layers=4, intermediate_size=128, vocab_size=1097, head_dim=16, tie_word_embeddings=True,
        query_pre_attn_scalar=16, sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}}),
        dict(_DROP, t_prompt=24)),
    "gemma4_text": ("Gemma4TextConfig", "Gemma4ForCausalLM", 1014, dict(
        _TANH, num_hidden_layers=6, intermediate_size=128, vocab_size=1103, head_dim=16, tie_word_embeddings=True,
        sliding_window=8, final_logit_softcapping=10.0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "sliding_attention", "full_attention"],
        global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=1103, use_double_wide_mlp=True),
        dict(_DROP, t_prompt=24)),
    "gemma4_moe": ("Gemma4TextConfig", "Gemma4ForCausalLM", 1015, dict(
        _TANH, num_hidden_layers=4, intermediate_size=96, vocab_size=1109, head_dim=16, tie_word_embeddings=True,
        sliding_window=8, final_logit_softcapping=10.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
        hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=8, top_k_experts=2,
        moe_intermediate_size=32), dict(_DROP, t_prompt=24, route_search=True)),
}
