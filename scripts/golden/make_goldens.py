"""Golden fixtures for bunsen's llama-family models, computed by Hugging Face transformers (CPU, float32, eager).

Not run by CI: it needs torch + transformers (the GPU machine; see README.md). Writes, per fixture,
<out>/<fixture>/config.json (config.save_pretrained, unchanged) and <out>/<fixture>/golden.safetensors
(f32 activations, logits, greedy tokens; metadata says how they were made), plus <out>/rope_tables.safetensors
(inverse frequencies + attention scaling from transformers' own rope init code). Invariants: weights come from
synth.py (bf16-exact, regenerated bit-identically by src/model/synthetic.cpp), so a fixture's weights are a
function of its seed alone; every fixture's greedy margins are >= MIN_MARGIN (else the next seed in its list is
tried, and the seed used is recorded). MoE fixtures (opts "route_search") instead take, of ROUTE_TRIES seeds
seed + 1000 k, the one whose HF routing is furthest from top-k ties (routing.py: fewest expected routing flips
over the rows the CUDA tests compare, of the f32 model in bf16 and of its 4-bit conversion, every MoE layer still
using most experts); their golden metadata records the routing statistics ("routing", "routing_q4") and how the
seed was chosen ("seed_rule").
"""
import argparse
import copy
import json
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import routing  # noqa: E402
import st_io  # noqa: E402
import synth  # noqa: E402

T_PROMPT = 16
N_GREEDY = 32
MIN_MARGIN = 1e-3
SEED_TRIES = 6  # seed, seed + 1000, ... when the greedy margin is too small
ROUTE_TRIES = 32  # MoE fixtures with opts "route_search": seeds seed + 1000 k, k < ROUTE_TRIES, are compared
DEMO_COL_STRIDE = 74
DEMO_N_COLS = 2048
DEMO_GREEDY_COL_STEP = 2  # greedy_logits_cols keeps every 2nd prompt column (stride 148) to stay ~300 KB

COMMON = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    max_position_embeddings=256,
    hidden_act="silu",
    pad_token_id=None,
    bos_token_id=1,
    eos_token_id=2,
)


def rope(rope_type="default", theta=10000.0, **kw):
    d = {"rope_type": rope_type, "rope_theta": float(theta)}
    d.update(kw)
    return d


# name -> (config class, model class, seed, kwargs on top of COMMON)
FIXTURES = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", 1001, dict(
        num_hidden_layers=4, intermediate_size=128, vocab_size=1031, tie_word_embeddings=False,
        rope_parameters=rope("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=32))),
    "llama_minicpm5": ("LlamaConfig", "LlamaForCausalLM", 1002, dict(
        hidden_size=128, num_attention_heads=16, num_key_value_heads=2, head_dim=128, intermediate_size=256,
        num_hidden_layers=2, vocab_size=1033, tie_word_embeddings=False, rope_parameters=rope())),
    "llama_linear_tied": ("LlamaConfig", "LlamaForCausalLM", 1003, dict(
        num_hidden_layers=2, intermediate_size=96, vocab_size=1039, tie_word_embeddings=True,
        attention_bias=True, mlp_bias=True, rope_parameters=rope("linear", factor=2.0))),
    "llama_yarn": ("LlamaConfig", "LlamaForCausalLM", 1004, dict(
        num_hidden_layers=2, intermediate_size=128, vocab_size=1049, tie_word_embeddings=False,
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16))),
    "mistral": ("MistralConfig", "MistralForCausalLM", 1005, dict(
        num_hidden_layers=2, intermediate_size=128, vocab_size=1051, tie_word_embeddings=False, head_dim=16,
        sliding_window=8, rope_parameters=rope())),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", 1006, dict(
        num_hidden_layers=2, intermediate_size=96, vocab_size=1061, tie_word_embeddings=True,
        rope_parameters=rope(theta=1000000.0))),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", 1007, dict(
        num_hidden_layers=3, intermediate_size=128, vocab_size=1063, tie_word_embeddings=False, head_dim=32,
        rope_parameters=rope(theta=1000000.0))),
    "qwen3_demo": ("Qwen3Config", "Qwen3ForCausalLM", 1008, dict(
        num_hidden_layers=2, intermediate_size=128, vocab_size=151936, tie_word_embeddings=True, head_dim=16,
        max_position_embeddings=40960, rope_parameters=rope(theta=1000000.0))),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", 1009, dict(
        num_hidden_layers=4, intermediate_size=128, vocab_size=1069, tie_word_embeddings=True,
        no_rope_layer_interval=2, rope_parameters=rope(theta=2000000.0))),
    "granite": ("GraniteConfig", "GraniteForCausalLM", 1010, dict(
        num_hidden_layers=2, intermediate_size=128, vocab_size=1087, tie_word_embeddings=True,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125, logits_scaling=8.0,
        rope_parameters=rope())),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", 1011, dict(
        num_hidden_layers=2, intermediate_size=128, vocab_size=1091, tie_word_embeddings=False,
        sliding_window=None, original_max_position_embeddings=256,
        rope_parameters=rope(partial_rotary_factor=0.5))),
}


def _load_family_fixtures():
    """Fixture tables of the other families: scripts/golden/fixtures_<family>.py, each defining FIXTURES with
    entries (config class, model class, seed, kwargs[, opts]). opts (all optional): "t_prompt": prompt length
    (default T_PROMPT); "route_search": True picks the seed by routing margins (MoE; see run_fixture);
    "drop_common": COMMON keys
    that do not apply; "inner": model -> the decoder module holding embed_tokens / layers / norm (default
    model.model); "inv_freq": model -> rotary inv_freq tensor or None (default inner.rotary_emb.inv_freq when
    present); "meta": config -> extra metadata dict."""
    import glob
    import importlib
    for path in sorted(glob.glob(os.path.join(HERE, "fixtures_*.py"))):
        mod = importlib.import_module(os.path.basename(path)[:-3])
        for name, spec in mod.FIXTURES.items():
            if name in FIXTURES:
                raise RuntimeError(f"fixture {name} defined twice ({path})")
            FIXTURES[name] = spec


_load_family_fixtures()


def fixture_opts(spec):
    return spec[4] if len(spec) > 4 else {}


def inner_of(model, opts):
    return opts["inner"](model) if "inner" in opts else model.model


def inv_freq_of(model, opts):
    if "inv_freq" in opts:
        return opts["inv_freq"](model)
    rot = getattr(inner_of(model, opts), "rotary_emb", None)
    return None if rot is None or not hasattr(rot, "inv_freq") else rot.inv_freq


# Rope table cases: name -> (config class, rotary class, config kwargs, seq_len or None)
_RT_BASE = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=64,
                num_hidden_layers=1, vocab_size=64, max_position_embeddings=256, pad_token_id=None)


def _rt(**kw):
    d = dict(_RT_BASE)
    d.update(kw)
    return d


_REAL_128 = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
ROPE_CASES = {
    "default": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(rope_parameters=rope()), None),
    "default_theta1e6_hd128": ("LlamaConfig", "LlamaRotaryEmbedding",
                               _rt(**_REAL_128, rope_parameters=rope(theta=1e6)), None),
    "linear": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(rope_parameters=rope("linear", factor=2.0)), None),
    "dynamic_init": ("LlamaConfig", "LlamaRotaryEmbedding",
                     _rt(max_position_embeddings=32, rope_parameters=rope("dynamic", factor=2.0)), None),
    "dynamic_long": ("LlamaConfig", "LlamaRotaryEmbedding",
                     _rt(max_position_embeddings=32, rope_parameters=rope("dynamic", factor=2.0)), 100),
    "dynamic_short": ("LlamaConfig", "LlamaRotaryEmbedding",
                      _rt(max_position_embeddings=32, rope_parameters=rope("dynamic", factor=2.0)), 20),
    "llama3": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(rope_parameters=rope(
        "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)), None),
    "llama3_real": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rope_parameters=rope("llama3", theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=8192)), None),
    "yarn": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16)),
        None),
    "yarn_attention_factor": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16,
                                                         attention_factor=0.8)), None),
    "yarn_mscale": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16,
                                                         mscale=1.0, mscale_all_dim=0.5)), None),
    "yarn_mscale_equal": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16,
                                                         mscale=0.707, mscale_all_dim=0.707)), None),
    "yarn_betas": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=16,
                                                         beta_fast=8.0, beta_slow=2.0)), None),
    "yarn_no_truncate": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        **_REAL_128, max_position_embeddings=131072,
        rope_parameters=rope("yarn", theta=1e6, factor=4.0, original_max_position_embeddings=32768,
                             truncate=False)), None),
    "yarn_real": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        **_REAL_128, max_position_embeddings=131072,
        rope_parameters=rope("yarn", theta=1e6, factor=4.0, original_max_position_embeddings=32768)), None),
    "yarn_partial": ("LlamaConfig", "LlamaRotaryEmbedding", _rt(
        **_REAL_128, max_position_embeddings=131072,
        rope_parameters=rope("yarn", theta=1e6, factor=4.0, original_max_position_embeddings=32768,
                             partial_rotary_factor=0.5)), None),
    "partial_default": ("Phi3Config", "Phi3RotaryEmbedding", _rt(
        original_max_position_embeddings=256, rope_parameters=rope(partial_rotary_factor=0.5)), None),
}


def log(*a):
    print(*a, flush=True)


def f32_bytes(t):
    return t.detach().to("cpu").contiguous().float().numpy().astype("<f4").tobytes()


def i32_bytes(values):
    return st_io.pack_i32([int(v) for v in values])


def versions():
    import numpy
    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "numpy": numpy.__version__}


def build_config(cfg_name, kwargs):
    import transformers
    cls = getattr(transformers, cfg_name)
    kwargs = copy.deepcopy(kwargs)  # configs standardise rope_parameters in place
    cfg = cls(**copy.deepcopy(kwargs))
    for k, v in kwargs.items():
        if k == "rope_parameters":
            continue
        try:
            got = getattr(cfg, k, "<missing>")
        except Exception as e:  # noqa: BLE001 - per-layer attributes (Gemma 4) refuse global reads
            got = f"<{type(e).__name__}>"
        if got != v:
            log(f"  CONFIG NOTE {cfg_name}.{k}: asked {v!r}, config has {got!r}")
    return cfg


def tie_groups(model):
    """{name: canonical name} for state-dict entries sharing storage (tied embeddings)."""
    sd = model.state_dict()
    by_ptr = {}
    for name, t in sd.items():
        by_ptr.setdefault((t.data_ptr(), tuple(t.shape)), []).append(name)
    canon = {}
    for names in by_ptr.values():
        if len(names) == 1:
            canon[names[0]] = names[0]
            continue
        keep = [n for n in names if "embed_tokens" in n]
        if len(keep) != 1:
            raise RuntimeError(f"unexpected shared tensors {names}")
        for n in names:
            canon[n] = keep[0]
    return canon


def load_synthetic(model, seed):
    """Loads synth.py weights into every state-dict entry; returns {saved name: (shape, bf16 bits)}."""
    import torch
    sd = model.state_dict()
    canon = tie_groups(model)
    saved = {}
    for name, t in sd.items():
        if canon[name] == name:
            saved[name] = (list(t.shape), synth.bf16_bits_np(name, list(t.shape), seed))
    tensors = {}
    for name, t in sd.items():
        shape, bits = saved[canon[name]]
        f = (bits.astype("uint32") << 16).view("float32").reshape(shape)
        tensors[name] = torch.from_numpy(f.copy())
    model.load_state_dict(tensors, strict=True)
    for name, p in model.state_dict().items():
        if not torch.equal(p, tensors[name]):
            raise RuntimeError(f"{name} did not load")
    ties = sorted(n for n in canon if canon[n] != n)
    return saved, ties


def capture_forward(model, ids, opts=None):
    """One forward over ids [T]; returns {capture name: [T, ...] tensor} and logits [T, V]."""
    import torch
    caps = {}
    handles = []

    def out_hook(key):
        def h(mod, inp, out):
            o = out[0] if isinstance(out, (tuple, list)) else out
            caps[key] = o.detach()[0].float().clone()
        return h

    def pre_hook(mod, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        caps["decoder_in"] = h.detach()[0].float().clone()

    inner = inner_of(model, opts or {})
    handles.append(inner.embed_tokens.register_forward_hook(out_hook("embed")))
    handles.append(inner.layers[0].register_forward_pre_hook(pre_hook, with_kwargs=True))
    for i, layer in enumerate(inner.layers):
        handles.append(layer.register_forward_hook(out_hook(f"layer.{i}")))
    handles.append(inner.norm.register_forward_hook(out_hook("final_norm")))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return caps, out.logits[0].detach().float().clone()


def greedy(model, prompt):
    import torch
    seq = list(prompt)
    toks, margins, last_rows = [], [], []
    for _ in range(N_GREEDY):
        with torch.no_grad():
            row = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1].float()
        top = torch.topk(row, 2).values
        margins.append(float(top[0] - top[1]))
        nxt = int(torch.argmax(row))
        toks.append(nxt)
        seq.append(nxt)
        last_rows.append(row)
    return toks, margins, last_rows


def fixture_config(spec):
    """The fixture's transformers config: COMMON (less opts' drop_common) + its kwargs."""
    cfg_name, _, _, kw = spec[:4]
    kwargs = {k: v for k, v in COMMON.items() if k not in fixture_opts(spec).get("drop_common", ())}
    kwargs.update(kw)
    return build_config(cfg_name, kwargs)


def instantiate(cfg, model_name):
    """model_name(cfg) in float32, eval mode, eager attention (checked). Sets cfg._attn_implementation."""
    import torch
    import transformers
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:  # noqa: BLE001 - fall back to set_attn_implementation below
        log(f"  NOTE: cannot set config._attn_implementation ({e!r})")
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).float().eval()
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
        impl = getattr(model.config, "_attn_implementation", None)
    if impl is None:
        log("  WARNING: model.config has no _attn_implementation; cannot confirm eager attention")
    elif impl != "eager":
        raise RuntimeError(f"attention implementation is {impl!r}, wanted eager")
    return model


def routing_shape(cfg):
    """(top_k, n_experts) of an MoE config, None for a dense one."""
    d = cfg.to_dict()
    if not routing.is_moe_config(d):
        return None
    return routing.top_k_of(d), int(d["num_experts"])


def search_route_seed(name, spec, tries):
    """Of seeds base + 1000 k (k < tries) whose greedy margins pass MIN_MARGIN, the one with the lowest
    routing.score (expected routing flips over the compared rows: the f32 model's in bf16 plus the 4-bit
    conversion's, routing.quantize_like_convert) among those whose every MoE
    layer routes to >= routing.MIN_EXPERT_COVERAGE of the experts (any, with a warning, when none does);
    ties: the earliest. Returns (seed, its routing summary, the rule as text)."""
    _, model_name, base, _ = spec[:4]
    opts = fixture_opts(spec)
    cfg = fixture_config(spec)
    shape = routing_shape(cfg)
    if shape is None:
        raise RuntimeError(f"{name}: route_search on a config without experts")
    model = instantiate(cfg, model_name)
    t_prompt = opts.get("t_prompt", T_PROMPT)
    best = None
    for k in range(tries):
        seed = base + 1000 * k
        t0 = time.time()
        load_synthetic(model, seed)
        prompt = synth.prompt_ids(seed, cfg.vocab_size, t_prompt)
        toks, margins, _ = greedy(model, prompt)
        if min(margins) < MIN_MARGIN:
            log(f"  route seed {seed}: greedy margin {min(margins):.3g} < {MIN_MARGIN}, skipped")
            continue
        summary, q4 = routing.measure_both(model, prompt, toks, *shape)
        covered = routing.coverage_ok(summary)
        sc = routing.score(summary, q4)
        log(f"  route seed {seed}: score {sc:.3f}{'' if covered else ' (too few experts used)'} "
            f"[{time.time() - t0:.1f} s]\n    f32 {routing.describe(summary)}\n    q4  {routing.describe(q4)}")
        key = (not covered, sc, k)
        if best is None or key < best[0]:
            best = (key, seed, summary)
    if best is None:
        raise RuntimeError(f"{name}: no seed of {tries} passed the greedy margin check")
    if best[0][0]:
        log(f"  WARNING {name}: no seed routes to {routing.MIN_EXPERT_COVERAGE:.0%} of the experts at every layer")
    rule = (f"routing search: of seeds {base} + 1000 k, k < {tries}, with greedy margins >= {MIN_MARGIN}, the "
            f"lowest expected routing flips, f32 model at eps {routing.EPS_BF16:g} + its 4-bit conversion at eps "
            f"{routing.EPS_Q4:g} (scripts/golden/routing.py), among those using >= "
            f"{routing.MIN_EXPERT_COVERAGE:g} of the experts per layer")
    log(f"  {name}: chose seed {best[1]} (score {best[0][1]:.3f}) of {tries}")
    return best[1], best[2], rule


def run_fixture_seed(name, spec, seed, out_dir, weights_dir, seed_rule=None):
    import torch
    cfg_name, model_name, _, _ = spec[:4]
    opts = fixture_opts(spec)
    cfg = fixture_config(spec)
    fx_dir = os.path.join(out_dir, name)
    os.makedirs(fx_dir, exist_ok=True)
    cfg.save_pretrained(fx_dir)
    model = instantiate(cfg, model_name)
    saved, ties = load_synthetic(model, seed)

    vocab = cfg.vocab_size
    t_prompt = opts.get("t_prompt", T_PROMPT)  # longer for windows / DeltaNet chunks
    prompt = synth.prompt_ids(seed, vocab, t_prompt)
    caps, logits = capture_forward(model, prompt, opts)
    toks, margins, last_rows = greedy(model, prompt)
    if not torch.allclose(last_rows[0], logits[-1], rtol=1e-5, atol=1e-5):
        raise RuntimeError("greedy step 0 disagrees with the captured prompt forward")
    min_margin = min(margins)
    log(f"  seed {seed}: min margin {min_margin:.6g}, greedy {toks}")
    if min_margin < MIN_MARGIN:
        return None
    shape = routing_shape(cfg)
    route_summary, route_q4 = routing.measure_both(model, prompt, toks, *shape) if shape is not None else (None, None)
    if route_summary is not None:
        log(f"  seed {seed}: f32 {routing.describe(route_summary)}\n  seed {seed}: q4  {routing.describe(route_q4)}")

    rot = getattr(inner_of(model, opts), "rotary_emb", None)
    inv = inv_freq_of(model, opts)
    inv_freq = inv.detach().float() if inv is not None else None
    att = float(getattr(rot, "attention_scaling", 1.0))
    n_layers = cfg.num_hidden_layers
    tensors = {"input_ids": ("I32", [t_prompt], i32_bytes(prompt)),
               "greedy": ("I32", [N_GREEDY], i32_bytes(toks)),
               "greedy_margins": ("F32", [N_GREEDY], st_io.pack_f32(margins))}
    if inv_freq is not None:
        tensors["rope_inv_freq"] = ("F32", list(inv_freq.shape), f32_bytes(inv_freq))
    for key in ["embed", "decoder_in", "final_norm"] + [f"layer.{i}" for i in range(n_layers)]:
        t = caps[key]
        tensors[key] = ("F32", list(t.shape), f32_bytes(t))
    if vocab > 100000:
        cols = list(range(0, DEMO_COL_STRIDE * DEMO_N_COLS, DEMO_COL_STRIDE))
        sub = logits[:, cols]
        tensors["logits_cols"] = ("F32", list(sub.shape), f32_bytes(sub))
        tensors["logit_col_ids"] = ("I32", [len(cols)], i32_bytes(cols))
        tensors["logits_argmax"] = ("I32", [t_prompt], i32_bytes(torch.argmax(logits, dim=-1).tolist()))
        gcols = cols[::DEMO_GREEDY_COL_STEP]
        gsub = torch.stack(last_rows)[:, gcols]
        tensors["greedy_logits_cols"] = ("F32", list(gsub.shape), f32_bytes(gsub))
        tensors["greedy_col_ids"] = ("I32", [len(gcols)], i32_bytes(gcols))
    else:
        tensors["logits"] = ("F32", list(logits.shape), f32_bytes(logits))
        rows = torch.stack(last_rows)
        tensors["greedy_logits"] = ("F32", list(rows.shape), f32_bytes(rows))

    weights_meta = {n: {"shape": s, "fnv1a64": "%016x" % synth.fnv1a64(synth.bf16_bytes(b))}
                    for n, (s, b) in sorted(saved.items())}
    meta = dict(versions())
    meta.update({
        "fixture": name, "seed": str(seed), "min_margin": repr(min_margin), "attention_scaling": repr(att),
        "weights": json.dumps(weights_meta, sort_keys=True), "tied": json.dumps(ties),
        "prompt_rule": synth.PROMPT_RULE, "config_class": cfg_name, "model_class": model_name,
        "attn_implementation": "eager", "dtype": "float32 (weights bf16-exact, upcast)", "device": "cpu",
        "greedy_rule": f"{N_GREEDY} steps: full forward over the whole sequence (no cache), argmax of last row",
        "captures": "embed = embedding module output; decoder_in = hidden_states entering layer 0; "
                    "layer.i = decoder layer i output; final_norm = final norm output; logits = model logits "
                    "(after any logits scaling); greedy_logits[s] = last-row logits at greedy step s",
    })
    if "meta" in opts:
        meta.update({k: str(v) for k, v in opts["meta"](cfg).items()})
    if route_summary is not None:
        meta["routing"] = routing.to_json(route_summary)
        meta["routing_q4"] = routing.to_json(route_q4)
    if seed_rule:
        meta["seed_rule"] = seed_rule
    if hasattr(cfg, "no_rope_layers"):
        meta["no_rope_layers"] = json.dumps(list(cfg.no_rope_layers))
    if "logits_cols" in tensors:
        meta["logit_cols_rule"] = (f"logits_cols: ids 0, {DEMO_COL_STRIDE}, ..., {DEMO_COL_STRIDE * (DEMO_N_COLS - 1)}; "
                                   f"greedy_logits_cols: every {DEMO_GREEDY_COL_STEP}nd of those")
    st_io.write_safetensors(os.path.join(fx_dir, "golden.safetensors"), tensors, meta)
    if weights_dir and vocab <= 100000:  # the demo's 19 MB embedding is left out: regenerate it instead
        wd = os.path.join(weights_dir, name)
        os.makedirs(wd, exist_ok=True)
        st_io.write_safetensors(os.path.join(wd, "model.safetensors"),
                                {n: ("BF16", s, synth.bf16_bytes(b)) for n, (s, b) in saved.items()},
                                {"format": "pt"})
    with open(os.path.join(fx_dir, "config.json")) as f:
        log("  config.json:", json.dumps(json.load(f), sort_keys=True))
    size = os.path.getsize(os.path.join(fx_dir, "golden.safetensors"))
    log(f"  wrote {name}/golden.safetensors ({size} bytes), attention_scaling {att}, "
        f"inv_freq {None if inv_freq is None else inv_freq.tolist()}")
    res = {"seed": seed, "min_margin": min_margin, "bytes": size}
    if route_summary is not None:
        res.update(routing_min_margin=route_summary["min_margin"], routing_p5_margin=route_summary["p5_margin"],
                   expected_flipped_rows_bf16=route_summary["expected_flipped_rows"]["bf16"],
                   expected_flipped_rows_q4=route_q4["expected_flipped_rows"]["q4"])
    return res


def run_fixture(name, spec, out_dir, weights_dir, route_tries=ROUTE_TRIES, forced_seed=None):
    """Writes one fixture. forced_seed: that seed, no search or retry. MoE fixtures with opts "route_search"
    (and route_tries > 0): the seed search_route_seed picks. Others: the first of SEED_TRIES seeds whose
    greedy margins pass MIN_MARGIN."""
    if forced_seed is not None:
        res = run_fixture_seed(name, spec, forced_seed, out_dir, weights_dir,
                               seed_rule=f"forced on the command line (--seed {name}={forced_seed})")
        if res is None:
            raise RuntimeError(f"{name}: forced seed {forced_seed} fails the greedy margin check (< {MIN_MARGIN})")
        return res
    if fixture_opts(spec).get("route_search") and route_tries > 0:
        seed, _, rule = search_route_seed(name, spec, route_tries)
        res = run_fixture_seed(name, spec, seed, out_dir, weights_dir, seed_rule=rule)
        if res is None:  # the search ran the same greedy check on the same weights
            raise RuntimeError(f"{name}: seed {seed} passed the greedy check in the search but not when written")
        return res
    base = spec[2]
    for k in range(SEED_TRIES):
        seed = base + 1000 * k
        res = run_fixture_seed(name, spec, seed, out_dir, weights_dir)
        if res is not None:
            if k:
                log(f"  NOTE {name}: seed {base} failed the margin check; used {seed}")
            return res
        log(f"  MARGIN TOO SMALL for {name} at seed {seed} (< {MIN_MARGIN}); trying the next seed")
    raise RuntimeError(f"{name}: no seed in {SEED_TRIES} tries gave margins >= {MIN_MARGIN}")


def make_rope_tables(out_dir):
    import importlib

    import torch
    from transformers import modeling_rope_utils as mru
    tensors, meta = {}, dict(versions())
    for case, (cfg_name, rot_name, kw, seq_len) in ROPE_CASES.items():
        try:
            cfg = build_config(cfg_name, kw)
            rope_type = cfg.rope_parameters["rope_type"]
            mt = cfg.model_type
            rot_cls = getattr(importlib.import_module(f"transformers.models.{mt}.modeling_{mt}"), rot_name)
            if seq_len is None:
                rot = rot_cls(config=cfg)
                inv, att = rot.inv_freq.detach().float(), float(rot.attention_scaling)
                if rope_type in mru.ROPE_INIT_FUNCTIONS:  # cross-check the class against the function
                    inv2, att2 = mru.ROPE_INIT_FUNCTIONS[rope_type](cfg, None)
                    if not torch.equal(inv2.float(), inv) or float(att2) != att:
                        raise RuntimeError("rotary class and ROPE_INIT_FUNCTIONS disagree")
            else:
                inv, att = mru.ROPE_INIT_FUNCTIONS[rope_type](cfg, None, seq_len=seq_len)
                inv, att = inv.detach().float(), float(att)
            tensors[f"{case}.inv_freq"] = ("F32", list(inv.shape), f32_bytes(inv))
            meta[f"{case}.attention_scaling"] = repr(att)
            meta[f"{case}.config"] = cfg.to_json_string(use_diff=False)
            meta[f"{case}.seq_len"] = "none" if seq_len is None else str(seq_len)
            meta[f"{case}.rope_type"] = rope_type
            log(f"  rope {case}: type {rope_type}, att {att!r}, inv_freq[:4] {inv[:4].tolist()} ... n={inv.numel()}")
        except Exception:
            log(f"  ROPE CASE FAILED {case}:\n{traceback.format_exc()}")
    meta["cases"] = json.dumps(sorted(c for c in ROPE_CASES if f"{c}.inv_freq" in tensors))
    st_io.write_safetensors(os.path.join(out_dir, "rope_tables.safetensors"), tensors, meta)
    return len(tensors) == len(ROPE_CASES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "golden", "data"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--weights", default="", help="also write <dir>/<fixture>/model.safetensors (bf16)")
    ap.add_argument("--no-rope-tables", action="store_true")
    ap.add_argument("--route-tries", type=int, default=ROUTE_TRIES,
                    help="seeds compared by routing margins for MoE fixtures (0: plain greedy-margin retries)")
    ap.add_argument("--seed", default="", help="comma-separated name=seed: write that fixture with that seed "
                                                "(no search, no retry)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        ap.error(f"unknown fixture(s) {', '.join(unknown)}; known: {', '.join(sorted(FIXTURES))}")
    forced = {}
    for item in (x for x in args.seed.split(",") if x):
        n, _, v = item.partition("=")
        if n not in FIXTURES or not v.isdigit():
            ap.error(f"--seed wants name=seed with a known fixture name and a decimal seed, got {item!r}")
        forced[n] = int(v)

    import torch
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    log("versions:", json.dumps(versions()))
    os.makedirs(args.out, exist_ok=True)
    failed, summary = [], {}
    for name in names:
        log(f"fixture {name}")
        try:
            summary[name] = run_fixture(name, FIXTURES[name], args.out, args.weights, args.route_tries,
                                        forced.get(name))
        except Exception:
            log(f"FIXTURE FAILED {name}:\n{traceback.format_exc()}")
            failed.append(name)
    if not args.no_rope_tables:
        log("rope tables")
        if not make_rope_tables(args.out):
            failed.append("rope_tables")
    log("summary:", json.dumps(summary, sort_keys=True))
    if failed:
        log("FAILED:", ", ".join(failed))
        sys.exit(1)
    log("all fixtures written")


if __name__ == "__main__":
    main()
