"""Qwen3-MoE golden fixtures (see make_goldens.py): several experts active per token, normalized and raw
top-k weights, dense (mlp_only / decoder_sparse_step) layers between sparse ones. Their seeds are chosen by
routing margin (route_search; make_goldens.py / routing.py): random routers put some tokens' k-th and (k+1)-th
experts within bf16 noise of a tie, which the CUDA parity tests cannot tell from a kernel bug."""

_ROUTE = dict(route_search=True)

FIXTURES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", 1016, dict(
        num_hidden_layers=3, intermediate_size=128, vocab_size=1117, head_dim=16, tie_word_embeddings=False,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[1], rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        _ROUTE),
    "qwen3_moe_raw": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", 1017, dict(
        num_hidden_layers=4, intermediate_size=96, vocab_size=1123, head_dim=16, tie_word_embeddings=True,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=False,
        decoder_sparse_step=2, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        _ROUTE),
}
