#!/usr/bin/env python3
"""Block timelines of the decode attention kernels, written by BUNSEN_DECODE_TIMING=file.csv (one row per block
of the slice and combine kernels: kind, layer, x, y, z, smid, keys, t0..t4 in ns; see
src/kernels/cuda/decode_timing.cuh).

  BUNSEN_DECODE_TIMING=t.csv bunsen benchmark --device cuda --synthetic llama3.1-8b --gen 48 --no-probe
  scripts/decode_timing.py t.csv [--skip 4] [--gap-us 20] [--json]

A launch is the slice blocks of one layer whose entries are within --gap-us of each other; its combine blocks
are that layer's combine records that start before the next slice launch of the layer. Per launch, times are
from the first block's entry (T0): `wait` = when the PDL wait returned (t1), `first` = warp 0's first key tile
landed (t2), `loop` = the key loop done (t3), `end` = the block exited (t4). The table gives the median over
launches of: the launch span (last slice exit - T0), the median block's phases, and the straggler (the block
that exits last) phases, how far it ends after the median block, and whether it shares its SM with another
block of the launch; then the combine grid's entry, wait return and end on the same clock, and its blocks'
median load (wait returned to partials loaded) and merge times. --skip drops each layer's first launches (the
eager warm-up steps).
"""
import argparse
import collections
import csv
import json
import statistics
import sys

PHASES = ("entry", "wait", "first", "loop", "end")


def load(path):
    recs = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            recs.append({"kind": r["kind"], "layer": int(r["layer"]), "block": (int(r["x"]), int(r["y"]), int(r["z"])),
                         "smid": int(r["smid"]), "keys": int(r["keys"]),
                         "t": [int(r[f"t{i}"]) for i in range(5)]})
    if not recs:
        sys.exit(f"no block records in {path}")
    return recs


def launches(recs, gap_ns):
    """[(layer, [slice records], [combine records])] in time order."""
    by_layer = collections.defaultdict(lambda: {"slice": [], "combine": []})
    for r in recs:
        by_layer[r["layer"]][r["kind"]].append(r)
    out = []
    for layer, kinds in by_layer.items():
        sl = sorted(kinds["slice"], key=lambda r: r["t"][0])
        groups, cur = [], []
        for r in sl:
            if cur and r["t"][0] - cur[-1]["t"][0] > gap_ns:
                groups.append(cur)
                cur = []
            cur.append(r)
        if cur:
            groups.append(cur)
        comb = sorted(kinds["combine"], key=lambda r: r["t"][0])
        for i, g in enumerate(groups):
            lo = g[0]["t"][0]
            hi = groups[i + 1][0]["t"][0] if i + 1 < len(groups) else float("inf")
            out.append((layer, i, g, [c for c in comb if lo <= c["t"][0] < hi]))
    out.sort(key=lambda l: l[2][0]["t"][0])
    return out


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def analyse(recs, skip, gap_us):
    rows = [l for l in launches(recs, gap_us * 1000) if l[1] >= skip]
    if not rows:
        sys.exit("no slice launches left after --skip")
    per = collections.defaultdict(list)
    sm_share, straggler_z = 0, collections.Counter()
    for _, _, sl, comb in rows:
        t0 = min(r["t"][0] for r in sl)
        rel = lambda r, i: (r["t"][i] - t0) / 1000.0  # noqa: E731
        last = max(sl, key=lambda r: r["t"][4])
        ends = sorted(rel(r, 4) for r in sl)
        mid = sorted(sl, key=lambda r: r["t"][4])[len(sl) // 2]
        per["blocks"].append(len(sl))
        per["span_us"].append(rel(last, 4))
        for i, p in enumerate(PHASES):
            per["median_block_" + p].append(rel(mid, i))
            per["straggler_" + p].append(rel(last, i))
        per["straggler_after_median_us"].append(rel(last, 4) - rel(mid, 4))
        per["last_entry_us"].append(max(rel(r, 0) for r in sl))
        per["first_wait_return_us"].append(min(rel(r, 1) for r in sl))
        per["p90_end_us"].append(ends[int(0.9 * (len(ends) - 1))])
        loops = [(r["t"][3] - r["t"][2]) / 1000.0 for r in sl]
        per["loop_median_us"].append(med(loops))
        per["loop_max_us"].append(max(loops))
        same_sm = sum(1 for r in sl if r["smid"] == last["smid"])
        sm_share += same_sm > 1
        straggler_z[last["block"][2]] += 1
        if comb:
            per["combine_blocks"].append(len(comb))
            per["combine_first_entry_us"].append(min(rel(c, 0) for c in comb))
            per["combine_wait_return_us"].append(min(rel(c, 1) for c in comb))
            per["combine_end_us"].append(max(rel(c, 4) for c in comb))
            per["combine_load_us"].append(med([(c["t"][2] - c["t"][1]) / 1000.0 for c in comb]))
            per["combine_merge_us"].append(med([(c["t"][3] - c["t"][2]) / 1000.0 for c in comb]))
    summary = {k: med(v) for k, v in per.items()}
    summary["launches"] = len(rows)
    summary["straggler_shares_sm"] = sm_share / len(rows)
    summary["straggler_slice_index"] = dict(straggler_z.most_common(5))
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=4, help="launches of each layer to drop first (warm-up)")
    ap.add_argument("--gap-us", type=float, default=20.0, help="entries further apart start a new launch")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    s = analyse(load(a.csv), a.skip, a.gap_us)
    if a.json:
        print(json.dumps(s, indent=1))
        return
    print(f"{s['launches']} slice launches, {s['blocks']:.0f} blocks each (medians over launches, "
          f"us from the first block's entry)")
    print(f"  span {s['span_us']:.2f}   last entry {s['last_entry_us']:.2f}   first wait return "
          f"{s['first_wait_return_us']:.2f}   90% of blocks done {s['p90_end_us']:.2f}")
    print(f"  key loop per block: median {s['loop_median_us']:.2f}, max {s['loop_max_us']:.2f}")
    for who in ("median_block", "straggler"):
        print(f"  {who:13s} " + "  ".join(f"{p} {s[who + '_' + p]:6.2f}" for p in PHASES))
    print(f"  straggler ends {s['straggler_after_median_us']:.2f} us after the median block; shares its SM with "
          f"another block in {100 * s['straggler_shares_sm']:.0f} % of launches; slice index (count): "
          f"{s['straggler_slice_index']}")
    if "combine_end_us" in s:
        print(f"  combine: {s['combine_blocks']:.0f} blocks, first entry {s['combine_first_entry_us']:.2f}, wait "
              f"returns {s['combine_wait_return_us']:.2f}, last exit {s['combine_end_us']:.2f}; per block: loads "
              f"{s['combine_load_us']:.2f}, merge {s['combine_merge_us']:.2f}")


if __name__ == "__main__":
    main()
