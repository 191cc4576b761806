"""Deterministic synthetic weights: the Python twin of src/model/synthetic.{h,cpp} (bit-identical).

Not a general RNG. Spec (keep in sync with synthetic.h):
  key = fnv1a64(name) ^ seed;  h = splitmix64(key + i)  (i = flat index, mod 2^64)
  x = float(int64(h >> 40) - 2^23) / 2^23;  v = bf16_rne(f32(f32(x * scale) + offset));  |v| < 2^-14 -> +0
Scale/offset by the full HF name (first rule that matches): "norm" in name and endswith ".weight" -> 0.25/1;
"layer_scalar" in name -> 0.25/1; endswith ".router.scale" -> 0.25/1;
endswith ".bias" -> 0.25/0; "embed_tokens" in name -> 1/0; == "lm_head.weight" -> f32(4/sqrt(in))/0;
endswith ".router.proj.weight" -> f32(8/sqrt(in))/0; anything else -> f32(1/sqrt(in))/0 with in = shape[-1] (0-d: 1/0).
numpy is used when importable (vectorised, chunked); otherwise a pure-Python path gives the same bits.
"""
import math
import struct

try:
    import numpy as np
except ImportError:  # the dev machine has no numpy; small tensors only there
    np = None

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
F16_MIN_NORMAL = 2.0 ** -14
PROMPT_SALT = 0x5EED
PROMPT_VOCAB_CAP = 151643
CHUNK = 1 << 22


def fnv1a64(data, h=FNV_OFFSET):
    """FNV-1a 64 of bytes (or of a str's UTF-8 bytes)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def splitmix64(x):
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def f32(x):
    """Round a Python float (double) to the nearest float32, ties to even."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_rne_bits(bits):
    """core/dtype.h f32_to_bf16 on a float32 bit pattern (no NaN occurs here)."""
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_to_float(b):
    return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]


def synthetic_key(name, seed):
    return fnv1a64(name) ^ (seed & MASK64)


def synthetic_scale(name, shape):
    """(scale, offset) as float32-exact Python floats."""
    if "norm" in name and name.endswith(".weight"):
        return 0.25, 1.0
    if "layer_scalar" in name:  # Gemma 4 scales each layer's output by it: near 1 like a norm weight
        return 0.25, 1.0
    if name.endswith(".router.scale"):  # Gemma 4 multiplies the router input by it: near 1 like a norm weight
        return 0.25, 1.0
    if name.endswith(".bias"):
        return 0.25, 0.0
    if "embed_tokens" in name:
        return 1.0, 0.0
    if len(shape) == 0:
        return 1.0, 0.0
    n_in = int(shape[-1])
    if n_in <= 0:
        raise ValueError(f"tensor {name!r} has an empty last dim")
    if name == "lm_head.weight":
        return f32(4.0 / math.sqrt(n_in)), 0.0
    if name.endswith(".router.proj.weight"):  # Gemma 4 routes on rms_norm(x) * d^-0.5: spread the logits
        return f32(8.0 / math.sqrt(n_in)), 0.0
    return f32(1.0 / math.sqrt(n_in)), 0.0


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _value_bits_py(key, i, scale, offset):
    h = splitmix64((key + i) & MASK64)
    x = ((h >> 40) - (1 << 23)) / 8388608.0  # exact
    prod = f32(x * scale)  # the double product is exact; one rounding to f32
    s = f32(prod + offset)  # double rounding is innocuous for + (53 >= 2*24 + 2)
    b = bf16_rne_bits(f32_bits(s))
    if abs(bf16_to_float(b)) < F16_MIN_NORMAL:
        return 0
    return b


def bf16_bits_py(name, shape, seed):
    """Pure Python: list of bf16 bit patterns (ints)."""
    scale, offset = synthetic_scale(name, shape)
    key = synthetic_key(name, seed)
    return [_value_bits_py(key, i, scale, offset) for i in range(numel(shape))]


def _bf16_bits_np_chunk(key, begin, end, scale, offset):
    with np.errstate(over="ignore"):
        z = np.arange(begin, end, dtype=np.uint64) + np.uint64(key)
        z = z + np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        z = z ^ (z >> np.uint64(31))
    k = (z >> np.uint64(40)).astype(np.int64) - np.int64(1 << 23)
    x = k.astype(np.float32) * np.float32(1.0 / 8388608.0)
    s = (x * np.float32(scale)) + np.float32(offset)  # two separate float32 ops, as in C++
    bits = s.view(np.uint32)
    bits = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    b16 = bits.astype(np.uint16)
    tiny = (b16 & np.uint16(0x7FFF)) < np.uint16(0x3880)  # |v| < 2^-14 (0x3880 = bf16 bits of 2^-14)
    b16[tiny] = 0
    return b16


def bf16_bits_np(name, shape, seed):
    """numpy: uint16 array of bf16 bit patterns, shaped `shape`."""
    scale, offset = synthetic_scale(name, shape)
    key = synthetic_key(name, seed)
    n = numel(shape)
    out = np.empty(n, dtype=np.uint16)
    for b in range(0, n, CHUNK):
        e = min(n, b + CHUNK)
        out[b:e] = _bf16_bits_np_chunk(key, b, e, scale, offset)
    return out.reshape([int(d) for d in shape])


def bf16_bits(name, shape, seed):
    """bf16 bit patterns: numpy uint16 array when numpy exists, else a list of ints."""
    if np is not None:
        return bf16_bits_np(name, shape, seed)
    return bf16_bits_py(name, shape, seed)


def float32_array(name, shape, seed):
    """numpy float32 array of the values (needs numpy)."""
    b = bf16_bits_np(name, shape, seed)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_bytes(bits):
    """Little-endian bytes of bf16 bit patterns (numpy array or list)."""
    if np is not None and isinstance(bits, np.ndarray):
        return bits.astype("<u2").tobytes()
    return struct.pack("<%dH" % len(bits), *bits)


def prompt_ids(seed, vocab_size, n=16):
    """Prompt token ids: splitmix64((seed ^ 0x5eed) + j) mod min(vocab, 151643), j = 0..n-1."""
    m = min(int(vocab_size), PROMPT_VOCAB_CAP)
    base = (seed ^ PROMPT_SALT) & MASK64
    return [splitmix64((base + j) & MASK64) % m for j in range(n)]


PROMPT_RULE = "ids[j] = splitmix64(((seed ^ 0x5eed) + j) mod 2^64) mod min(vocab_size, 151643), j = 0..T-1"


def _self_test():
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert fnv1a64("") == FNV_OFFSET and fnv1a64("a") == 0xAF63DC4C8601EC8C
    if np is None:
        print("synth.py: numpy missing, checked the pure-Python constants only")
        return
    cases = [("model.norm.weight", [64], 3), ("model.layers.0.self_attn.q_proj.bias", [40], 5),
             ("model.embed_tokens.weight", [31, 8], 7), ("lm_head.weight", [31, 8], 7),
             ("model.layers.0.mlp.down_proj.weight", [300, 1024], (1 << 64) - 1)]
    for name, shape, seed in cases:
        a = [int(v) for v in bf16_bits_np(name, shape, seed).reshape(-1)]
        b = bf16_bits_py(name, shape, seed)
        assert a == b, name
    print("synth.py: numpy and pure-Python paths agree on %d cases" % len(cases))


if __name__ == "__main__":
    _self_test()
