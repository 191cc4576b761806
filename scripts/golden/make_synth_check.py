"""Writes tests/golden/data/synth_check.json: known answers of the synthetic generator (synth.py) that
tests/unit/model/test_synthetic.cpp checks the C++ generator against. Pure Python, runs anywhere.
Not the golden model fixtures (make_goldens.py). Each case: name, shape, seed, scale/offset, key, the
first 16 values (floats, exact), the number of exact zeros, and FNV-1a-64 of all bf16 LE bytes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402

CASES = [
    ("model.layers.0.input_layernorm.weight", [64], 7),
    ("model.layers.1.self_attn.q_norm.weight", [32], (1 << 63) + 5),
    ("model.layers.1.self_attn.q_proj.bias", [48], 7),
    ("model.embed_tokens.weight", [37, 16], 123),
    ("lm_head.weight", [37, 16], 123),
    ("model.layers.0.mlp.down_proj.weight", [96, 64], 0),
    ("model.layers.0.self_attn.qkv_proj.weight", [80, 64], 0xFFFFFFFFFFFFFFFF),
    ("model.layers.0.mlp.experts.gate_up_proj", [2, 8, 24], 9),
    ("model.layers.2.router.proj.weight", [8, 64], 11),
    ("model.layers.2.router.scale", [64], 11),
    # large enough that |v| < 2^-14 values are flushed to zero (scale 1/32: ~1 in 512)
    ("model.layers.3.mlp.up_proj.weight", [256, 1024], 42),
]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "data", "synth_check.json")
    cases = []
    for name, shape, seed in CASES:
        bits = synth.bf16_bits_py(name, shape, seed)
        scale, offset = synth.synthetic_scale(name, shape)
        cases.append({
            "name": name,
            "shape": shape,
            "seed": str(seed),  # decimal string: JSON numbers above 2^53 are not portable
            "key": "%016x" % synth.synthetic_key(name, seed),
            "scale": scale,
            "offset": offset,
            "first": [synth.bf16_to_float(b) for b in bits[:16]],
            "n_zero": sum(1 for b in bits if b == 0),
            "bf16_fnv1a64": "%016x" % synth.fnv1a64(synth.bf16_bytes(bits)),
        })
    doc = {
        "generator": "scripts/golden/make_synth_check.py (pure-Python path of synth.py)",
        "prompt_rule": synth.PROMPT_RULE,
        "prompt_ids_seed_1_vocab_1031": synth.prompt_ids(1, 1031),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d cases)" % (out_path, len(cases)))


if __name__ == "__main__":
    main()
