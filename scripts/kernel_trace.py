#!/usr/bin/env python3
"""Per-step breakdown of a kernel timeline written by libbunsen_kernel_trace.so (tools/kernel_trace).

  LD_PRELOAD=build/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE=t.csv bunsen benchmark --device cuda ...
  scripts/kernel_trace.py t.csv [--graph auto|ID] [--skip 2] [--gap-us 5] [--by-shape] [--json]
  scripts/kernel_trace.py new.csv --baseline old.csv      # the same breakdown side by side, with deltas
  scripts/kernel_trace.py serve.csv --whole [--after-idle-ms 500]  # a whole run (a server under load): busy/idle

Steps are the launches of one CUDA graph (default: the graph with the most kernel launches, i.e. the decode
step), split where the GPU was idle for more than --gap-us (default 5: inside a graph the kernels follow
within ~1 us, while the host leaves ~10 us between two decode steps). Within a step, kernels are ordered by start;
a kernel's *marginal* time is how far it pushed the step's end: end - max(earlier ends), at least 0. The
marginals sum to the step's span, so they say where the wall time of a step goes even when programmatic
dependent launch overlaps neighbouring kernels (duration - marginal is the part hidden under others).
--by-shape keys kernels by name, grid and shared memory (one template serving several launches of a layer
shows as one row per launch shape); --json prints the same table as JSON; --baseline compares two traces
(an A/B run: per kernel, marginal µs per step in each and the difference).
--whole takes every kernel of the trace, in graphs or not (a serving run mixes eager prefill steps with
graph-replayed decode steps): the wall time from the first kernel's start to the last one's end, the part of
it the GPU ran no kernel (in gaps longer than --gap-us: time the host kept the GPU waiting), the busy
stretches between such gaps ("steps"), and per kernel its launches, duration and marginal time over the run.
"""
import argparse
import collections
import csv
import gzip
import json
import os
import re
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"bunsen::kernels::cuda::(qmma::)?", "", name)
    return name


def load(path, by_shape):
    rows = []
    if not os.path.exists(path):
        sys.exit(f"{path}: no such trace (was the library preloaded and did the process run kernels?)")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        for r in csv.DictReader(f):
            name = short(r["name"])
            if by_shape:
                name += f" [grid {r['grid']} x {r['block']}, smem {r['smem']}]"
            rows.append((int(r["start_ns"]), int(r["end_ns"]), int(r["graph"]), name))
    if not rows:
        sys.exit("no kernels in " + path)
    return rows


def breakdown(rows, graph, skip, gap_us):
    """{graph, steps, kernels_per_step, span_us, kernels: {name: (per_step, duration_us, marginal_us)}}."""
    if graph == "auto":
        counts = collections.Counter(g for _, _, g, _ in rows if g != 0)
        if not counts:
            sys.exit("no kernel ran inside a CUDA graph")
        graph = counts.most_common(1)[0][0]
    else:
        graph = int(graph)
    ks = sorted((r for r in rows if r[2] == graph), key=lambda r: r[0])
    steps, cur, last_end = [], [], None
    for k in ks:
        if cur and k[0] - last_end > gap_us * 1000:
            steps.append(cur)
            cur, last_end = [], None
        cur.append(k)
        last_end = k[1] if last_end is None else max(last_end, k[1])
    if cur:
        steps.append(cur)
    steps = steps[skip:]
    if not steps:
        sys.exit(f"graph {graph}: no steps left after skipping {skip}")
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])  # name -> [count, duration, marginal] (ns, all steps)
    spans = []
    for st in steps:
        end = st[0][0]
        for s, e, _, name in st:
            m = max(0, e - end)  # an idle gap before the kernel is charged to it
            end = max(end, e)
            p = per[name]
            p[0] += 1
            p[1] += e - s
            p[2] += m
        spans.append(end - st[0][0])
    n = len(steps)
    return {"graph": graph, "steps": n, "kernels_per_step": len(steps[0]), "span_us": sum(spans) / n / 1000,
            "kernels": {k: (c / n, d / n / 1000, m / n / 1000) for k, (c, d, m) in per.items()}}


def whole(rows, gap_us, after_ms=0.0):
    """{wall_us, idle_us, gaps, steps, step_us, in_graph_us, kernels: {name: (count, duration_us, marginal_us)}}.
    after_ms > 0: only the kernels after the last idle gap longer than after_ms (a server's start-up and its
    wait for the first request left out)."""
    ks = sorted(rows, key=lambda r: r[0])
    if after_ms > 0:
        end, first = ks[0][1], 0
        for i, (s, e, _, _) in enumerate(ks):
            if s - end > after_ms * 1e6:
                first = i
            end = max(end, e)
        ks = ks[first:]
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])
    end = ks[0][0]
    idle = gaps = 0
    in_graph = 0.0
    for s, e, g, name in ks:
        if s - end > gap_us * 1000:
            idle += s - end
            gaps += 1
        m = max(0, e - max(end, s))  # the kernel's own new busy time (idle before it is not charged)
        end = max(end, e)
        p = per[name]
        p[0] += 1
        p[1] += e - s
        p[2] += m
        if g != 0:
            in_graph += m
    wall = end - ks[0][0]
    return {"wall_us": wall / 1000, "idle_us": idle / 1000, "gaps": gaps, "steps": gaps + 1,
            "step_us": (wall - idle) / (gaps + 1) / 1000, "in_graph_us": in_graph / 1000,
            "kernels": {k: (c, d / 1000, m / 1000) for k, (c, d, m) in per.items()}}


def print_whole(w, top, width):
    wall = w["wall_us"]
    busy = wall - w["idle_us"]
    print(f"wall {wall / 1000:.1f} ms: busy {busy / 1000:.1f} ms ({100 * busy / wall:.1f} %), idle in {w['gaps']} gaps "
          f"> gap-us {w['idle_us'] / 1000:.1f} ms (mean gap {w['idle_us'] / max(1, w['gaps']):.1f} us); "
          f"{w['steps']} busy stretches of {w['step_us']:.1f} us mean; in CUDA graphs "
          f"{100 * w['in_graph_us'] / max(busy, 1e-9):.1f} % of the busy time")
    print(f"{'kernel':{width}s} {'launches':>9s} {'dur ms':>9s} {'marg ms':>9s} {'% busy':>7s}")
    items = sorted(w["kernels"].items(), key=lambda kv: -kv[1][2])
    for name, (c, d, m) in items[:top]:
        print(f"{name[:width]:{width}s} {c:9d} {d / 1000:9.2f} {m / 1000:9.2f} {100 * m / busy:6.1f}%")
    rest = items[top:]
    if rest:
        print(f"{'(' + str(len(rest)) + ' more)':{width}s} {sum(v[0] for _, v in rest):9d} "
              f"{sum(v[1] for _, v in rest) / 1000:9.2f} {sum(v[2] for _, v in rest) / 1000:9.2f}")


def print_table(b, top, width):
    span = b["span_us"]
    print(f"graph {b['graph']}: {b['steps']} steps of {b['kernels_per_step']} kernels, span {span:.1f} us per step "
          f"({1e6 / span:.1f} steps/s)")
    print(f"{'kernel':{width}s} {'per step':>8s} {'dur us':>9s} {'marg us':>9s} {'% span':>7s}")
    items = sorted(b["kernels"].items(), key=lambda kv: -kv[1][2])
    for name, (c, d, m) in items[:top]:
        print(f"{name[:width]:{width}s} {c:8.1f} {d:9.1f} {m:9.1f} {100 * m / span:6.1f}%")
    rest = items[top:]
    if rest:
        print(f"{'(' + str(len(rest)) + ' more)':{width}s} {'':8s} {sum(v[1] for _, v in rest):9.1f} "
              f"{sum(v[2] for _, v in rest):9.1f}")


def print_comparison(b, base, top, width):
    print(f"span per step: {base['span_us']:.1f} us (baseline) -> {b['span_us']:.1f} us "
          f"({b['span_us'] - base['span_us']:+.1f}); kernels per step {base['kernels_per_step']} -> "
          f"{b['kernels_per_step']}")
    print(f"{'kernel':{width}s} {'base marg':>9s} {'marg us':>9s} {'delta':>8s}")
    names = set(b["kernels"]) | set(base["kernels"])
    zero = (0.0, 0.0, 0.0)
    rows = [(n, base["kernels"].get(n, zero)[2], b["kernels"].get(n, zero)[2]) for n in names]
    rows.sort(key=lambda r: -abs(r[2] - r[1]))
    for name, m0, m1 in rows[:top]:
        print(f"{name[:width]:{width}s} {m0:9.1f} {m1:9.1f} {m1 - m0:+8.1f}")


def as_json(b):
    items = sorted(b["kernels"].items(), key=lambda kv: -kv[1][2])
    return {"graph": b["graph"], "steps": b["steps"], "kernels_per_step": b["kernels_per_step"],
            "span_us": b["span_us"], "kernels": [{"name": k, "per_step": c, "duration_us": d, "marginal_us": m}
                                                 for k, (c, d, m) in items]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the trace (.csv or .csv.gz)")
    ap.add_argument("--baseline", help="a second trace to compare against (same options)")
    ap.add_argument("--graph", default="auto", help="graph id of the steps (auto: the one with the most kernels)")
    ap.add_argument("--skip", type=int, default=2, help="steps skipped at the start (warm-up)")
    ap.add_argument("--gap-us", type=float, default=None,
                    help="idle us that separates two steps (default 5 for graph steps, 20 with --whole)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--by-shape", action="store_true", help="key kernels by name, grid and shared memory")
    ap.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    ap.add_argument("--whole", action="store_true", help="every kernel of the run, busy and idle time (a server)")
    ap.add_argument("--after-idle-ms", type=float, default=0.0,
                    help="with --whole: start after the last idle gap longer than this (a server's start-up)")
    args = ap.parse_args()

    width = 100 if args.by_shape else 70
    if args.gap_us is None:
        args.gap_us = 20.0 if args.whole else 5.0
    if args.whole:
        w = whole(load(args.csv, args.by_shape), args.gap_us, args.after_idle_ms)
        if args.json:
            print(json.dumps(w, indent=1))
        else:
            print_whole(w, args.top, width)
        return

    b = breakdown(load(args.csv, args.by_shape), args.graph, args.skip, args.gap_us)
    base = breakdown(load(args.baseline, args.by_shape), args.graph, args.skip, args.gap_us) if args.baseline else None
    if args.json:
        out = as_json(b)
        if base:
            out["baseline"] = as_json(base)
        print(json.dumps(out, indent=1))
        return
    if base:
        print_comparison(b, base, args.top, width)
    else:
        print_table(b, args.top, width)


if __name__ == "__main__":
    main()
