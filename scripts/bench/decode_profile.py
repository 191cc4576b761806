#!/usr/bin/env python3
"""Where one decode token's GPU time goes, per kernel, from Nsight Compute.

Runs `bunsen benchmark` twice under ncu (kernels serialised, clocks not locked, CUDA-graph nodes profiled
one by one), once with --gen SHORT and once with --gen LONG tokens, everything else equal; the difference
of the two runs' per-kernel totals divided by LONG - SHORT is one decode token: the prompt's prefill,
warm-up and graph capture cancel out. Prints a table (kernel, launches per token, us per token, DRAM GB/s,
share; GB/s only with --dram) and, with --json, writes it as JSON. Times are ncu's serialised kernel durations: they add up to
more than the benchmark's ms/token, where programmatic dependent launch overlaps neighbouring kernels.

  python3 scripts/bench/decode_profile.py --bunsen .gpu/bunsen -- --synthetic qwen3.5-4b --prompt-len 1024

With --range STEPS (for batched decode, e.g. `-- --synthetic llama3.1-8b --decode-batch 64 [--mixed-prefill 2048]`):
one run with BUNSEN_PROFILE_RANGE=1 and ncu --profile-from-start off records only the benchmark's STEPS timed
batched steps (not the sequences' prefills); the table is per step.
"""
import argparse
import collections
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile


def short_name(name):
    """A kernel's name without its template arguments and parameter list."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    base = re.sub(r"^(void|__global__)\s+", "", base)
    return base.split("::")[-1] or name[:60]


def number(text):
    """An ncu CSV value as a float ("7,968" -> 7968; empty or n/a -> 0)."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def profile(args, gen):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.csv")
        metrics = "gpu__time_duration.sum" + (",dram__bytes_read.sum,dram__bytes_write.sum" if args.dram else "")
        ranged = ["--profile-from-start", "off"] if args.range else []
        cmd = [args.ncu, "--clock-control", "none", "--graph-profiling", "node", "--metrics", metrics, "--csv",
               "--page", "raw"] + ranged + [
               "--log-file", log, args.bunsen, "benchmark", "--device", "cuda", "--no-probe", "--prefill-lens",
               str(args.prefill_len), "--gen", str(gen), "--json"] + args.bench_args
        env = dict(os.environ, BUNSEN_PROFILE_RANGE="1") if args.range else None
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=args.timeout, env=env)
        text = open(log, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit("no kernel rows in the ncu output (is the GPU visible? did the benchmark run?)")
    rows = list(csv.reader(io.StringIO(text[start:])))
    header = rows[0]
    col = {h: i for i, h in enumerate(header)}
    totals = collections.defaultdict(lambda: [0, 0.0, 0.0])  # name -> [launches, ns, dram bytes]
    for r in rows[1:]:
        if len(r) != len(header) or not r[col["ID"]].strip().isdigit():
            continue  # the units row, messages
        name = short_name(r[col["Kernel Name"]])
        t = totals[name]
        t[0] += 1
        t[1] += number(r[col["gpu__time_duration.sum"]])
        if "dram__bytes_read.sum" in col:
            t[2] += number(r[col["dram__bytes_read.sum"]]) + number(r[col["dram__bytes_write.sum"]])
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bunsen", default="build/bunsen")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--short", type=int, default=1, help="decode tokens of the first run")
    p.add_argument("--long", type=int, default=3, help="decode tokens of the second run")
    p.add_argument("--prefill-len", type=int, default=64, help="the benchmark's extra prefill length (short)")
    p.add_argument("--dram", action="store_true", help="also DRAM bytes per kernel (more ncu passes: slower)")
    p.add_argument("--timeout", type=int, default=280,
                   help="seconds per ncu run (each profiled kernel costs ~20 ms: a 42-layer model's ~700 launches per "
                        "token plus its prefill take minutes)")
    p.add_argument("--range", type=int, default=0,
                   help="STEPS: profile only the timed steps of --decode-batch (one run of --gen STEPS), per step")
    p.add_argument("--json", help="write the table here")
    p.add_argument("bench_args", nargs="*", help="after --: bunsen benchmark arguments (--synthetic SHAPE ...)")
    args = p.parse_args()
    if args.range:
        a, b = collections.defaultdict(lambda: [0, 0.0, 0.0]), profile(args, args.range)
        per = float(args.range)
    else:
        if args.long <= args.short:
            sys.exit("--long must be larger than --short")
        a, b = profile(args, args.short), profile(args, args.long)
        per = float(args.long - args.short)
    table = []
    for name in set(a) | set(b):
        n = (b[name][0] - a[name][0]) / per
        us = (b[name][1] - a[name][1]) / per / 1e3
        by = (b[name][2] - a[name][2]) / per
        if n > 0 or us > 0.05:
            table.append({"kernel": name, "launches": n, "us": us, "dram_gb_s": by / (us * 1e3) if us > 0 else 0.0})
    table.sort(key=lambda e: -e["us"])
    total = sum(e["us"] for e in table)
    launches = sum(e["launches"] for e in table)
    print(f"per {'step' if args.range else 'decode token'}: {launches:.0f} launches, {total:.1f} us of serialised kernel time")
    print(f"{'kernel':48} {'n/tok':>7} {'us/tok':>9} {'us each':>8} {'GB/s':>7} {'share':>6}")
    for e in table:
        each = e["us"] / e["launches"] if e["launches"] > 0 else 0.0
        print(f"{e['kernel'][:48]:48} {e['launches']:7.1f} {e['us']:9.1f} {each:8.2f} {e['dram_gb_s']:7.0f} "
              f"{100 * e['us'] / total if total else 0:5.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench_args": args.bench_args, "launches_per_token": launches, "us_per_token": total,
                       "kernels": table}, f, indent=1)


if __name__ == "__main__":
    main()
