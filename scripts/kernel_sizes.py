#!/usr/bin/env python3
"""sm_90a code size of every kernel in some CUDA sources: each file compiled to a cubin (nvcc -cubin, the build's
flags), then the size of each kernel's .text section, largest first, demangled.

  scripts/kernel_sizes.py [--filter SUBSTRING] [--top N] [FILE.cu ...]   (default: the batch-1 decode chain's files)

Why it matters: a batch-1 decode launch is latency-bound, and its SMs fetch its instructions cold every layer
(the weight streams between evict them), so a kernel's code size is time on the critical path (docs/PERFORMANCE.md,
twenty-seventh session: the split decode attention's 143 KB instance spent ~10 us per layer more after its PDL
wait than its 46 KB lean instance). Needs nvcc only (no GPU, no cuobjdump).
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

DEFAULT = ["attention_decode_mma", "attention_decode", "attention_combine", "gemv", "gemv_qmma", "gemv_qmma_h8",
           "rope_kv", "rowwise", "rowwise_fused", "activation"]


def text_sections(path):
    """[(size, mangled name)] of an ELF's .text.<kernel> sections."""
    b = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]
    out = []
    for name, _typ, _flags, _addr, _off, size in secs:
        end = b.index(b"\0", stroff + name)
        n = b[stroff + name:end].decode()
        if n.startswith(".text."):
            out.append((size, n[len(".text."):]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--filter", default="", help="only kernels whose demangled name contains this")
    ap.add_argument("--top", type=int, default=15, help="kernels per file (0: all)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = a.files or [os.path.join(root, "src/kernels/cuda", f + ".cu") for f in DEFAULT]
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            cubin = os.path.join(tmp, os.path.basename(f) + ".cubin")
            cmd = ["nvcc", "-I", os.path.join(root, "src"), "-O3", "-DNDEBUG", "-DBUNSEN_HAVE_CUDA=1", "-std=c++20",
                   "--generate-code=arch=compute_90a,code=[sm_90a]", "-cubin", "-o", cubin, f]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"== {f}: nvcc failed\n{r.stderr[-2000:]}", file=sys.stderr)
                continue
            rows = sorted(text_sections(cubin), reverse=True)
            names = subprocess.run(["c++filt"], input="\n".join(n for _, n in rows), capture_output=True,
                                   text=True).stdout.split("\n")
            rows = [(s, d.replace("bunsen::kernels::cuda::", "").replace("(anonymous namespace)::", ""))
                    for (s, _), d in zip(rows, names) if a.filter in d]
            print(f"== {os.path.relpath(f, root)}: {len(rows)} kernels")
            for s, d in rows[: a.top or None]:
                print(f"{s / 1024:8.1f} KB  {d[:160]}")


if __name__ == "__main__":
    main()
