#!/usr/bin/env python3
"""A step-cost model of `bunsen benchmark --serve` against `bunsen serve` (closed-loop clients, equal prompt and
output lengths), for choosing what to measure: not a measurement, and no substitute for one.

  scripts/serve_model.py [--mbt 512 1024 2048 4096] [--streams 64] [--requests 128] [--prompt 1024] [--gen 256]
                         [--card h100|h200] [--kv off|8|fp8|4] [--probe-tflops T] [--json]

The scheduler part follows src/engine/scheduler.h: every step takes one decode token per running sequence that
has finished its prompt, then prompt chunks FCFS under the step budget (--max-num-batched-tokens); a sequence
whose prompt completes in a step samples its first token there; a client sends its next request when its last
one finishes. A step costs max(weight stream, GEMM compute of its tokens) + decode attention (the rows' KV at
the packed kernel's rate; --kv scales the bytes, not the rate) + prefill attention (its FLOPs) + a fixed host/launch part. The card constants are the
measured ones of docs/PERFORMANCE.md (8B bf16: 15.01 GB of weights; H100 probe 3.02 TB/s, pp2048 ~39.4k tok/s;
the packed decode attention ~2.35-2.9 TB/s on both cards); --fixed-ms calibrates the model to a measured run
(H100, 64 streams, budget 2048: 3,559 tok/s). Known miss: it reads budgets of 512 / 1024 tokens at +3 % / +1 %
over 2048, where the H100 measured -6.9 % / -2.5 % (thirty-fifth session): a mixed step costs more than its
max(weights, GEMM) term (small GEMMs below the matmul rate, the varlen prefill attention per chunk).
"""
import argparse
import json
import statistics

CARDS = {  # weight GB/s reached by the decode GEMMs, GEMM TFLOP/s, decode-attention KV GB/s
    "h100": {"weights_gbs": 2800.0, "tflops": 640.0, "kv_gbs": 2500.0},
    "h200": {"weights_gbs": 3900.0, "tflops": 640.0, "kv_gbs": 2700.0},
}
PEAK_TFLOPS = 989.0  # H100 SXM / H200 dense bf16 tensor-core peak
PARAMS = 8.03e9  # Llama-3.1-8B: 2 FLOPs per parameter per token
WEIGHT_GB = 15.01
LAYERS, HIDDEN, KV_BYTES_PER_TOKEN = 32, 4096, 32 * 8 * 128 * 2 * 2
# Bytes per key per kv head (K + V, head_dim 128) of each --kv-quant cache: codes plus f32 (scale, bias) per
# group (int8 / int4: groups of 64; fp8: one group per row), against bf16's 512.
KV_ROW_BYTES = {"off": 2 * 128 * 2, "8": 2 * (128 + 2 * 8), "fp8": 2 * (128 + 8), "4": 2 * (64 + 2 * 8)}


def flops_per_output_token(prompt, gen):
    """Matmul + attention FLOPs one request costs per output token: its prompt (logits of the last position
    only) and its gen - 1 decode steps (the first output token comes from the prompt's last position)."""
    layer = HIDDEN * (HIDDEN + 2 * 1024 + HIDDEN) + 3 * HIDDEN * 14336  # q, k, v, o; gate, up, down
    head = 128256 * HIDDEN
    attn = lambda p: 4 * LAYERS * HIDDEN * p  # QK^T and PV of one token over p earlier positions
    total = prompt * 2 * LAYERS * layer + sum(attn(p) for p in range(prompt)) + 2 * head
    total += sum(2 * (LAYERS * layer + head) + attn(prompt + i) for i in range(1, gen))
    return total / gen


def simulate(mbt, streams, requests, prompt, gen, card, fixed_ms, kv="off"):
    c = CARDS[card]
    kv_bytes = KV_BYTES_PER_TOKEN * KV_ROW_BYTES[kv] / KV_ROW_BYTES["off"]
    seqs = []  # dicts: prefilled, generated, arrival step time
    sent = 0
    t = 0.0
    ttft, done_tokens, steps, riding, decode_rows_total = [], 0, 0, 0, 0

    def submit(now):
        nonlocal sent
        seqs.append({"pre": 0, "gen": 0, "t0": now})
        sent += 1

    for _ in range(min(streams, requests)):
        submit(0.0)
    while seqs:
        decode = [s for s in seqs if s["pre"] == prompt]
        budget = max(mbt, streams) - len(decode)
        chunks = []  # (seq, start, n)
        for s in seqs:  # FCFS: the list is in arrival order
            if s["pre"] < prompt and budget > 0:
                n = min(prompt - s["pre"], budget)
                chunks.append((s, s["pre"], n))
                budget -= n
        n_pre = sum(n for _, _, n in chunks)
        tokens = len(decode) + n_pre
        gemm_ms = max(WEIGHT_GB / c["weights_gbs"] * 1e3, 2 * PARAMS * tokens / (c["tflops"] * 1e12) * 1e3)
        kv_ms = sum(prompt + s["gen"] for s in decode) * kv_bytes / (c["kv_gbs"] * 1e9) * 1e3
        attn_flops = sum(4 * LAYERS * HIDDEN * n * (start + n / 2) for _, start, n in chunks)
        step_ms = gemm_ms + kv_ms + attn_flops / (c["tflops"] * 1e12) * 1e3 + fixed_ms
        t += step_ms / 1e3
        steps += 1
        decode_rows_total += len(decode)
        if n_pre > 0:
            riding += len(decode)
        finished = []
        for s in decode:
            s["gen"] += 1
            done_tokens += 1
            if s["gen"] == gen:
                finished.append(s)
        for s, start, n in chunks:
            s["pre"] = start + n
            if s["pre"] == prompt:  # the prompt's last chunk samples the first token
                s["gen"] = 1
                done_tokens += 1
                ttft.append(t - s["t0"])
                if gen == 1:
                    finished.append(s)
        for s in finished:
            seqs.remove(s)
            if sent < requests:
                submit(t)
    ttft.sort()
    return {
        "mbt": mbt, "card": card, "kv": kv, "output_tok_s": done_tokens / t, "seconds": t, "steps": steps,
        "decode_rows_in_prefill_steps": riding / max(decode_rows_total, 1),
        "ttft_p50_ms": statistics.median(ttft) * 1e3, "ttft_p99_ms": ttft[int(0.99 * (len(ttft) - 1))] * 1e3,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mbt", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--card", choices=sorted(CARDS), default="h100")
    ap.add_argument("--kv", choices=sorted(KV_ROW_BYTES), default="off",
                    help="--kv-quant of the server: its bytes per key, read at the same rate as bf16's")
    ap.add_argument("--fixed-ms", type=float, default=0.5, help="host and launch time per step")
    ap.add_argument("--probe-tflops", type=float, default=0,
                    help="the card's measured matmul rate (bunsen benchmark's probe_matmul_gflops / 1000): "
                         "the compute bound at it")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.streams < 1 or a.requests < 1 or a.prompt < 1 or a.gen < 1 or min(a.mbt) < 1:
        ap.error("--streams, --requests, --prompt, --gen and --mbt must be positive")
    if a.probe_tflops < 0:
        ap.error("--probe-tflops must be >= 0")
    bound = flops_per_output_token(a.prompt, a.gen)
    rows = [simulate(m, a.streams, a.requests, a.prompt, a.gen, a.card, a.fixed_ms, a.kv) for m in a.mbt]
    if a.json:
        out = {"flops_per_output_token": bound, "rows": rows}
        if a.probe_tflops > 0:
            out["bound_at_probe_tok_s"] = a.probe_tflops * 1e12 / bound
        print(json.dumps(out, indent=1))
        return
    print(f"model (not a measurement): {a.card}, --kv-quant {a.kv}, {a.streams} streams, {a.requests} requests, "
          f"{a.prompt} in / {a.gen} out")
    for r in rows:
        print(f"  budget {r['mbt']:6d}: {r['output_tok_s']:8.1f} tok/s  {r['steps']:5d} steps  "
              f"decode rows in prefill steps {100 * r['decode_rows_in_prefill_steps']:5.1f} %  "
              f"TTFT p50 / p99 {r['ttft_p50_ms']:7.0f} / {r['ttft_p99_ms']:7.0f} ms")
    # The compute bound, whatever the memory and the scheduler do: every FLOP at the given matmul rate.
    print(f"  compute bound: {bound / 1e9:.1f} GFLOP per output token; at most "
          f"{CARDS[a.card]['tflops'] * 1e12 / bound:,.0f} tok/s at the model's {CARDS[a.card]['tflops']:.0f} TFLOP/s, "
          f"{PEAK_TFLOPS * 1e12 / bound:,.0f} at the {PEAK_TFLOPS:.0f} TFLOP/s dense bf16 peak")
    if a.probe_tflops > 0:
        print(f"  at the measured {a.probe_tflops:.0f} TFLOP/s matmul rate: at most "
              f"{a.probe_tflops * 1e12 / bound:,.0f} tok/s")


if __name__ == "__main__":
    main()
