#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_safetensors into tests/fuzz/corpus/safetensors/.

Not a general safetensors writer: it builds a few tiny valid files and a few deliberately broken ones
(stdlib only). Invariant: output is deterministic, so re-running it leaves the committed corpus unchanged.
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def image(header, data, pad=True, length=None):
    text = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, bytes) else header
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def main():
    os.makedirs(OUT, exist_ok=True)
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    files = {
        "valid_f32": image({"w": entry("F32", [2, 2], 0, 16)}, f32),
        "valid_mixed": image(
            {
                "__metadata__": {"format": "pt"},
                "a.bf16": entry("BF16", [3], 0, 6),
                "b.i64": entry("I64", [1], 6, 14),
                "c.u8": entry("U8", [2, 1], 14, 16),
                "d.empty": entry("F16", [0, 4], 16, 16),
                "e.u32": entry("U32", [], 16, 20),
                "f.i32": entry("I32", [1, 1, 1], 20, 24),
            },
            bytes(range(24)),
        ),
        "valid_empty": image({}, b""),
        "invalid_gap": image({"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 4, 6)}, bytes(6)),
        "invalid_overlap": image({"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 2, 6)}, bytes(6)),
        "invalid_dtype": image({"a": entry("F64", [1], 0, 8)}, bytes(8)),
        "invalid_truncated": image({"w": entry("F32", [2, 2], 0, 16)}, f32[:15]),
        "invalid_duplicate": image(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                   b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)),
        "invalid_header_length": image({"w": entry("U8", [1], 0, 1)}, b"\x01", length=1 << 40),
        "invalid_utf8": image(b'{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00"),
    }
    for name, blob in files.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
