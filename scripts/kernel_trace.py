#!/usr/bin/env python3
"""Per-step breakdown of a kernel timeline written by libbunsen_kernel_trace.so (tools/kernel_trace).

  LD_PRELOAD=build/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE=t.csv bunsen benchmark --device cuda ...
  scripts/kernel_trace.py t.csv [--graph auto|ID] [--skip 2] [--gap-us 20] [--by-shape] [--json]

Steps are the launches of one CUDA graph (default: the graph with the most kernel launches, i.e. the decode
step), split where the GPU was idle for more than --gap-us. Within a step, kernels are ordered by start;
a kernel's *marginal* time is how far it pushed the step's end: end - max(earlier ends), at least 0. The
marginals sum to the step's span, so they say where the wall time of a step goes even when programmatic
dependent launch overlaps neighbouring kernels (duration - marginal is the part hidden under others).
--by-shape keys kernels by name, grid and shared memory (one template serving several launches of a layer
shows as one row per launch shape); --json prints the same table as JSON.
"""
import argparse
import collections
import csv
import gzip
import json
import re
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"bunsen::kernels::cuda::(qmma::)?", "", name)
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the trace (.csv or .csv.gz)")
    ap.add_argument("--graph", default="auto", help="graph id of the steps (auto: the one with the most kernels)")
    ap.add_argument("--skip", type=int, default=2, help="steps skipped at the start (warm-up)")
    ap.add_argument("--gap-us", type=float, default=20.0, help="idle time that separates two steps")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--by-shape", action="store_true", help="key kernels by name, grid and shared memory")
    ap.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    args = ap.parse_args()

    rows = []
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt", newline="") as f:
        for r in csv.DictReader(f):
            name = short(r["name"])
            if args.by_shape:
                name += f" [grid {r['grid']} x {r['block']}, smem {r['smem']}]"
            rows.append((int(r["start_ns"]), int(r["end_ns"]), int(r["graph"]), int(r["grid"]), name))
    if not rows:
        sys.exit("no kernels in " + args.csv)
    counts = collections.Counter(g for _, _, g, _, _ in rows if g != 0)
    if args.graph == "auto":
        if not counts:
            sys.exit("no kernel ran inside a CUDA graph")
        graph = counts.most_common(1)[0][0]
    else:
        graph = int(args.graph)
    ks = sorted((r for r in rows if r[2] == graph), key=lambda r: r[0])
    steps, cur, last_end = [], [], None
    for k in ks:
        if cur and k[0] - last_end > args.gap_us * 1000:
            steps.append(cur)
            cur, last_end = [], None
        cur.append(k)
        last_end = k[1] if last_end is None else max(last_end, k[1])
    if cur:
        steps.append(cur)
    steps = steps[args.skip:]
    if not steps:
        sys.exit(f"graph {graph}: no steps left after skipping {args.skip}")

    per = collections.defaultdict(lambda: [0, 0.0, 0.0])  # name -> [count, duration, marginal] (ns, all steps)
    spans = []
    for st in steps:
        end = st[0][0]
        for s, e, _, _, name in st:
            m = max(0, e - end)  # an idle gap before the kernel is charged to it
            end = max(end, e)
            p = per[name]
            p[0] += 1
            p[1] += e - s
            p[2] += m
        spans.append(end - st[0][0])
    n = len(steps)
    span = sum(spans) / n
    items = sorted(per.items(), key=lambda kv: -kv[1][2])
    if args.json:
        print(json.dumps({"graph": graph, "steps": n, "kernels_per_step": len(steps[0]), "span_us": span / 1000,
                          "kernels": [{"name": k, "per_step": c / n, "duration_us": d / n / 1000,
                                       "marginal_us": m / n / 1000} for k, (c, d, m) in items]}, indent=1))
        return
    print(f"graph {graph}: {n} steps of {len(steps[0])} kernels, span {span / 1000:.1f} us per step "
          f"({1e9 / span:.1f} steps/s)")
    w = 100 if args.by_shape else 70
    print(f"{'kernel':{w}s} {'per step':>8s} {'dur us':>9s} {'marg us':>9s} {'% span':>7s}")
    for name, (c, d, m) in items[: args.top]:
        print(f"{name[:w]:{w}s} {c / n:8.1f} {d / n / 1000:9.1f} {m / n / 1000:9.1f} {100 * m / n / span:6.1f}%")
    rest = items[args.top:]
    if rest:
        print(f"{'(' + str(len(rest)) + ' more)':{w}s} {'':8s} {sum(v[1] for _, v in rest) / n / 1000:9.1f} "
              f"{sum(v[2] for _, v in rest) / n / 1000:9.1f}")


if __name__ == "__main__":
    main()
