"""Qwen3.5 / Qwen3-Next hybrid golden fixtures (see make_goldens.py): gated DeltaNet layers interleaved with
gated full attention (full_attention_interval), partial rotary, prompts longer than one DeltaNet chunk (64)
so the chunked form crosses a chunk boundary; Qwen3-Next adds the MoE block with a shared expert. qwen3_next has
4 experts (top 2), not 8: with 8, 4 MoE layers and 112 compared rows, ~10 rows sit within 4-bit noise of a top-k
tie for any seed (bunsen CPU scan of 32 seeds: expected 4-bit flips 6.0-15.4, the CUDA test allows 5.6), and
with 4 the gap under the chosen experts is wider (iid logits: 2.4 % of decisions under margin 0.03 instead
of 5.5 %; the scan: 1.6-5.0 expected flips before choosing). Its seed is chosen by routing margin too
(route_search, see make_goldens.py / routing.py)."""

FIXTURES = {
    "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", 1018, dict(
        num_hidden_layers=4, intermediate_size=128, vocab_size=1129, head_dim=32, tie_word_embeddings=False,
        full_attention_interval=2, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}),
        dict(t_prompt=80)),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", 1019, dict(
        num_hidden_layers=4, intermediate_size=128, vocab_size=1151, head_dim=32, tie_word_embeddings=False,
        full_attention_interval=2, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}),
        dict(t_prompt=80, route_search=True)),
}
