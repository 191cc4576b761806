#!/usr/bin/env python3
"""Peer figures for docs/PERFORMANCE.md: Hugging Face transformers (eager and sdpa attention) on the same GPU,
random bf16 weights of the shapes `bunsen benchmark --synthetic` uses. Prints one JSON line per run:
prefill tok/s for a P-token prompt and batch-1 greedy decode tok/s for G tokens after it.
Usage (GPU machine): python3 scripts/bench/hf_peer.py [--shapes llama3.1-8b,llama3.2-1b] [--gen 128]"""
import argparse, json, time
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # same hyper-parameters as src/bench synthetic shapes
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True),
    "llama3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False),
}

def run(shape, attn, prompt, gen):
    cfg = LlamaConfig(**SHAPES[shape], rope_theta=500000.0, max_position_embeddings=131072, attn_implementation=attn)
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device="cuda")
    with torch.no_grad():
        model(ids[:, :16])  # warm-up
        torch.cuda.synchronize(); t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        torch.cuda.synchronize(); t1 = time.perf_counter()
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(gen):
            out = model(tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize(); t2 = time.perf_counter()
    r = dict(peer=f"transformers {transformers.__version__} ({attn})", torch=torch.__version__, shape=shape,
             prompt=prompt, prefill_tok_s=round(prompt / (t1 - t0), 1), gen=gen,
             decode_tok_s=round(gen / (t2 - t1), 2), ms_per_token=round(1000 * (t2 - t1) / gen, 3))
    print(json.dumps(r), flush=True)
    del model, past, out
    torch.cuda.empty_cache()

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="llama3.1-8b,llama3.2-1b")
    ap.add_argument("--attn", default="eager,sdpa")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--gen", type=int, default=128)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    for s in a.shapes.split(","):
        for attn in a.attn.split(","):
            run(s, attn, a.prompt, a.gen)
