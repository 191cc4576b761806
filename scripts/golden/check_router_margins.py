"""Routing conditioning of the MoE golden fixtures: how close each token's expert choice is to a top-k tie.

For every fixture directory (<data>/<name>/config.json + golden.safetensors) whose config has routed experts,
rebuilds the Hugging Face model from config.json and the fixture's metadata (config/model class, seed), loads
the synthetic weights of that seed (checked against the fixture's `weights` FNV-1a metadata), runs the
sequence the CUDA parity tests compare (prompt + greedy[:-1], teacher-forced) and prints, over all those
tokens and MoE layers, the minimum and 5th-percentile routing margin (routing.py / src/model/routing_trace.h:
(l_k - l_{k+1}) / sd(logits)), how many compared rows fall under a few margins, the expected number of rows
routed differently under bf16 and 4-bit noise, the experts used per layer, and the worst decisions - for the
f32 model (the bf16 CUDA test's reference) and for its 4-bit conversion (routing.quantize_like_convert, the
4-bit CUDA test's reference). It also
checks that the rebuilt model reproduces the fixture (prompt logits, greedy tokens), so the numbers are about
the committed goldens and not about some other draw.

Runs where make_goldens.py runs (torch + transformers, CPU float32; no network). Not a test: the verdict line
("ok" / "WEAK") is a heuristic: expected rows routed differently <= MAX_BF16_FRACTION of the rows for the f32
model at bf16 noise and <= MAX_Q4_FRACTION for the 4-bit model at 4-bit noise (a fifth and half of the CUDA
tests' 5 % budget). Exit status 1 when a fixture cannot be checked or does not
reproduce, or with --strict when one is WEAK.

  python3 scripts/golden/check_router_margins.py [--data tests/golden/data] [--only qwen3_next,gemma4_moe]
"""
import argparse
import json
import os
import struct
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_goldens as mg  # noqa: E402
import routing  # noqa: E402
import st_io  # noqa: E402
import synth  # noqa: E402

MAX_Q4_FRACTION = 0.025
MAX_BF16_FRACTION = 0.01
LOGITS_REL_TOL = 1e-4


def unpack(entry, want):
    dtype, shape, raw = entry
    if dtype != want:
        raise ValueError(f"expected {want}, got {dtype} {shape}")
    code = {"I32": "i", "F32": "f"}[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // 4, code), raw)), shape


def check_fixture(data_dir, name):
    """Returns (summary dict with checks, problems list), or None when the fixture is not MoE."""
    import torch
    import transformers
    fx_dir = os.path.join(data_dir, name)
    with open(os.path.join(fx_dir, "config.json")) as f:
        cfg_json = json.load(f)
    if not routing.is_moe_config(cfg_json):
        return None
    meta, tensors = st_io.read_safetensors(os.path.join(fx_dir, "golden.safetensors"))
    seed = int(meta["seed"])
    cfg = getattr(transformers, meta["config_class"]).from_pretrained(fx_dir)
    model = mg.instantiate(cfg, meta["model_class"])
    saved, _ = mg.load_synthetic(model, seed)
    problems = []

    want = json.loads(meta["weights"])
    for n, (shape, bits) in sorted(saved.items()):
        w = want.get(n)
        if w is None or list(w["shape"]) != list(shape):
            problems.append(f"weight {n} {shape} not in the fixture's metadata as such ({w})")
        elif w["fnv1a64"] != "%016x" % synth.fnv1a64(synth.bf16_bytes(bits)):
            problems.append(f"weight {n}: synth.py at seed {seed} hashes differently from the fixture")
    for n in sorted(set(want) - set(saved)):
        problems.append(f"weight {n} of the fixture is not in the model's state dict")

    ids, _ = unpack(tensors["input_ids"], "I32")
    greedy, _ = unpack(tensors["greedy"], "I32")
    T, G = len(ids), len(greedy)
    seq = ids + greedy[:-1]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0].float()
    if "logits" in tensors:
        ref, shape = unpack(tensors["logits"], "F32")
        ref = torch.tensor(ref, dtype=torch.float32).reshape(shape)
        err = float((logits[:T] - ref).abs().max() / ref.abs().max())
        if err > LOGITS_REL_TOL:
            problems.append(f"prompt logits differ from the fixture's: rel err {err:.3g} > {LOGITS_REL_TOL}")
    else:
        err = None
    tf_argmax = torch.argmax(logits[T - 1:], dim=-1).tolist()
    greedy_agree = sum(1 for a, b in zip(tf_argmax, greedy) if a == b)
    if greedy_agree != G:
        problems.append(f"teacher-forced argmax reproduces {greedy_agree}/{G} greedy tokens")

    d = cfg.to_dict()
    summary, q4 = routing.measure_both(model, ids, greedy, routing.top_k_of(d), int(d["num_experts"]))
    e_bf16, e_q4 = summary["expected_flipped_rows"]["bf16"], q4["expected_flipped_rows"]["q4"]
    weak = e_q4 > MAX_Q4_FRACTION * summary["rows"] or e_bf16 > MAX_BF16_FRACTION * summary["rows"]
    summary.update(q4=q4, score=routing.score(summary, q4), fixture=name, seed=seed,
                   seed_rule=meta.get("seed_rule", "first seed passing the greedy margin"), logits_rel_err=err,
                   greedy_reproduced=f"{greedy_agree}/{G}", verdict="WEAK" if weak else "ok",
                   covered=routing.coverage_ok(summary))
    return summary, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "tests", "golden", "data"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: every MoE fixture in --data)")
    ap.add_argument("--json", default="", help="also write the summaries to this file")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a fixture is WEAK")
    args = ap.parse_args()

    import torch
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    names = [n for n in args.only.split(",") if n] or sorted(
        n for n in os.listdir(args.data) if os.path.isfile(os.path.join(args.data, n, "golden.safetensors")))
    print("versions:", json.dumps(mg.versions()), flush=True)
    results, failed, weak = {}, [], []
    for name in names:
        try:
            got = check_fixture(args.data, name)
        except Exception:  # noqa: BLE001 - report and go on with the other fixtures
            print(f"{name}: CHECK FAILED\n{traceback.format_exc()}", flush=True)
            failed.append(name)
            continue
        if got is None:
            if args.only:
                print(f"{name}: not an MoE fixture, skipped", flush=True)
            continue
        s, problems = got
        results[name] = dict(s, problems=problems)
        q4 = s["q4"]
        print(f"{name}: seed {s['seed']} -> {s['verdict']}: min margin {s['min_margin']:.4g} (4-bit model "
              f"{q4['min_margin']:.4g}), p5 margin {s['p5_margin']:.4g} ({q4['p5_margin']:.4g}) over {s['decisions']} "
              f"decisions ({len(s['moe_layers'])} MoE layers x {s['positions']} tokens); expected rows routed "
              f"differently of {s['rows']}: bf16 test {s['expected_flipped_rows']['bf16']:.2f}, 4-bit test "
              f"{q4['expected_flipped_rows']['q4']:.2f} (score {s['score']:.2f}); greedy reproduced "
              f"{s['greedy_reproduced']}, logits rel err {s['logits_rel_err']}", flush=True)
        print(f"  f32 {routing.describe(s)}", flush=True)
        print(f"  q4  {routing.describe(q4)}", flush=True)
        print(f"  seed rule: {s['seed_rule']}", flush=True)
        for p in problems:
            print(f"  PROBLEM: {p}", flush=True)
        if problems:
            failed.append(name)
        if s["verdict"] != "ok":
            weak.append(name)
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps({n: json.loads(routing.to_json(r)) for n, r in results.items()}, indent=1,
                               sort_keys=True))
    print(f"checked {len(results)} MoE fixture(s); weak: {', '.join(weak) or 'none'}; "
          f"failed: {', '.join(failed) or 'none'}", flush=True)
    if failed or (args.strict and weak):
        sys.exit(1)


if __name__ == "__main__":
    main()
