"""Minimal safetensors writer/reader (pure Python; the format is an 8-byte LE header length, a JSON header,
then the raw little-endian tensor bytes). Not a replacement for the `safetensors` package: no mmap, no
framework tensors. Invariants: names are written sorted, data is packed in that order with no gaps, the
header is padded with spaces to a multiple of 8, and __metadata__ maps str -> str.
"""
import json
import struct

DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, shape, raw_bytes)}; metadata: {str: str}."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"metadata must map str to str, got {k!r}: {type(v).__name__}")
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    blobs = []
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        n = 1
        for d in shape:
            n *= int(d)
        if len(raw) != n * DTYPE_SIZE[dtype]:
            raise ValueError(f"{name}: {len(raw)} bytes for shape {shape} {dtype}")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Returns (metadata, {name: (dtype, shape, raw_bytes)})."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + b : base + e])
    return meta, out


def pack_f32(values):
    return struct.pack("<%df" % len(values), *values)


def pack_i32(values):
    return struct.pack("<%di" % len(values), *values)
