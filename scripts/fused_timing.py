#!/usr/bin/env python3
"""Reads the persistent decode step's timing record (BUNSEN_DECODE_FUSED_TIMING=FILE, decode_mega_common.cuh's Slot)
and prints where a layer's time goes: per segment of a layer (a phase's work, or the wait at the grid barrier
that ends it) the median over blocks and the slowest block, averaged over the layers past the first; then per
projection phase the consumers' wait for staged weights and the producer's wait for a free stage (both from
warp 0 / the producer lane of each block, SM clocks converted at the device's clock rate), and warp 0's wait
for the attention phase's staged keys.

  python3 scripts/fused_timing.py FILE [--json] [--slowest SEGMENT]

--slowest SEGMENT (e.g. attention) lists the blocks that spend longest in that segment (averaged over the same
layers, or in one with --layer N), which tells a block doing extra work (a kv head's merge) from an even spread.

Why: the fused step is slower than the per-op step on the 1B (H100, 2026-12-05); whether the consumers wait
for weights (the stream is the limit) or the producer waits for free stages (the dependent chain of norm,
barriers and attention is) decides what to change.
"""
import argparse
import json
import statistics
import struct
import sys

# decode_mega_common.cuh's Slot, in order.
EVENTS = ["start", "norm1", "qkv_done", "qkv_pass", "attn_done", "attn_pass", "o_loaded", "o_done", "o_pass",
          "norm2", "gu_done", "gu_pass", "act_loaded", "down_done", "down_pass"]
WAIT_DATA, WAIT_FREE, ISSUED, WAIT_KEYS = 15, 19, 23, 27
PHASES = ["qkv", "o", "gate_up", "down"]
# (segment, from event, to event): a layer's consecutive spans on consumer thread 0's clock.
SEGMENTS = [("norm1", "start", "norm1"), ("qkv", "norm1", "qkv_done"), ("bar_qkv", "qkv_done", "qkv_pass"),
            ("attention", "qkv_pass", "attn_done"), ("bar_attn", "attn_done", "attn_pass"),
            ("load_attn", "attn_pass", "o_loaded"), ("o", "o_loaded", "o_done"), ("bar_o", "o_done", "o_pass"),
            ("norm2", "o_pass", "norm2"), ("gate_up", "norm2", "gu_done"), ("bar_gu", "gu_done", "gu_pass"),
            ("load_act", "gu_pass", "act_loaded"), ("down", "act_loaded", "down_done"),
            ("bar_down", "down_done", "down_pass")]


def parse(data):
    grid, layers, slots, khz = struct.unpack_from("<4q", data, 0)
    n = grid * layers * slots
    words = struct.unpack_from("<%dQ" % n, data, 32)
    return grid, layers, slots, khz, words


def summarize(grid, layers, slots, khz, words):
    """Per segment and phase: (median over blocks, max over blocks) in microseconds, averaged over layers
    1 .. layers - 2 (or every layer when there are fewer than 3); the last layer has no closing barrier."""
    def at(b, l, s):
        return words[(b * layers + l) * slots + s]
    ev = {name: i for i, name in enumerate(EVENTS)}
    use = list(range(1, layers - 1)) if layers >= 3 else list(range(layers))
    us_per_clock = 1e3 / khz if khz > 0 else 0.0
    out = {"grid": grid, "layers": layers, "segments": {}, "phases": {}}
    for name, a, b in SEGMENTS:
        med, mx = [], []
        for l in use:
            d = [(at(blk, l, ev[b]) - at(blk, l, ev[a])) / 1e3 for blk in range(grid)]
            med.append(statistics.median(d))
            mx.append(max(d))
        out["segments"][name] = (statistics.fmean(med), statistics.fmean(mx))
    per_layer = [statistics.median([(at(blk, l + 1, ev["start"]) - at(blk, l, ev["start"])) / 1e3
                                    for blk in range(grid)]) for l in use if l + 1 < layers]
    out["layer_us"] = statistics.fmean(per_layer) if per_layer else 0.0
    for p, name in enumerate(PHASES):
        data = [statistics.median([at(blk, l, WAIT_DATA + p) * us_per_clock for blk in range(grid)]) for l in use]
        free = [statistics.median([at(blk, l, WAIT_FREE + p) * us_per_clock for blk in range(grid)]) for l in use]
        out["phases"][name] = {"consumer_wait_data_us": statistics.fmean(data),
                               "producer_wait_free_us": statistics.fmean(free)}
    # The attention phase's staged keys (issued within the q/k/v phase: no producer wait of their own).
    keys = [statistics.median([at(blk, l, WAIT_KEYS) * us_per_clock for blk in range(grid)]) for l in use]
    out["phases"]["attention"] = {"consumer_wait_data_us": statistics.fmean(keys), "producer_wait_free_us": None}
    return out


def slowest(grid, layers, slots, khz, words, segment, n=12, layer=None):
    """The n blocks with the longest mean time in `segment` over the summarized layers (or in one layer):
    [(block, us)]."""
    def at(b, l, s):
        return words[(b * layers + l) * slots + s]
    ev = {name: i for i, name in enumerate(EVENTS)}
    spans = {name: (a, b) for name, a, b in SEGMENTS}
    if segment not in spans:
        raise SystemExit("unknown segment %r (one of %s)" % (segment, ", ".join(spans)))
    a, b = spans[segment]
    use = list(range(1, layers - 1)) if layers >= 3 else list(range(layers))
    if layer is not None:
        use = [layer]
    per_block = [(blk, statistics.fmean([(at(blk, l, ev[b]) - at(blk, l, ev[a])) / 1e3 for l in use]))
                 for blk in range(grid)]
    return sorted(per_block, key=lambda x: (-x[1], x[0]))[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--slowest", metavar="SEGMENT")
    ap.add_argument("--layer", type=int, help="with --slowest: one layer instead of the mean")
    args = ap.parse_args()
    with open(args.file, "rb") as f:
        rec = parse(f.read())
    if args.slowest:
        for blk, us in slowest(*rec, args.slowest, layer=args.layer):
            print("block %4d %9.2f us" % (blk, us))
        return
    s = summarize(*rec)
    if args.json:
        json.dump(s, sys.stdout, indent=1)
        print()
        return
    print("grid %d, %d layers: %.1f us per layer (median block)" % (s["grid"], s["layers"], s["layer_us"]))
    print("%-10s %9s %9s" % ("segment", "median", "slowest"))
    for name, (med, mx) in s["segments"].items():
        print("%-10s %9.2f %9.2f" % (name, med, mx))
    print("%-10s %14s %16s" % ("phase", "wait data us", "producer wait us"))
    for name, p in s["phases"].items():
        free = p["producer_wait_free_us"]
        print("%-10s %14.2f %16s" % (name, p["consumer_wait_data_us"], "-" if free is None else "%.2f" % free))


if __name__ == "__main__":
    main()
