#!/usr/bin/env python3
"""scripts/fused_timing.py (the persistent decode step's timing record) on a record written here with known
spans: the segments come out as the differences of the recorded events (median and slowest block), the
layer's time as the step between layer starts, the waits converted from SM clocks at the recorded rate, and
the file's header (grid, layers, slots, clock) is what parse reads."""
import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "fused_timing.py")
spec = importlib.util.spec_from_file_location("fused_timing", SCRIPT)
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)

SLOTS = 32
KHZ = 2_000_000  # 2 GHz: 2,000 clocks per microsecond


def record(grid, layers, slow_block_attention_us):
    """Every layer: each event 1 us after the one before (ns on the timer), except that block 0's attention
    takes slow_block_attention_us; the layer's 15 events then the next layer starts 1 us after the last;
    consumer waits 2,000 clocks x (phase + 1), producer waits 4,000 x (phase + 1), the attention keys' wait
10,000 clocks."""
    words = [0] * (grid * layers * SLOTS)
    for b in range(grid):
        t = 0
        for l in range(layers):
            base = (b * layers + l) * SLOTS
            for e in range(len(ft.EVENTS)):
                if e > 0:
                    t += 1000
                    if ft.EVENTS[e] == "attn_done" and b == 0:
                        t += (slow_block_attention_us - 1) * 1000
                words[base + e] = t
            t += 1000
            for p in range(4):
                words[base + ft.WAIT_DATA + p] = 2000 * (p + 1)
                words[base + ft.WAIT_FREE + p] = 4000 * (p + 1)
            words[base + ft.WAIT_KEYS] = 2000 * 5
    return struct.pack("<4q", grid, layers, SLOTS, KHZ) + struct.pack("<%dQ" % len(words), *words)


class FusedTiming(unittest.TestCase):
    def test_segments_layer_time_and_waits(self):
        grid, layers = 3, 4
        s = ft.summarize(*ft.parse(record(grid, layers, 5)))
        self.assertEqual((s["grid"], s["layers"]), (grid, layers))
        self.assertAlmostEqual(s["segments"]["qkv"][0], 1.0)
        self.assertAlmostEqual(s["segments"]["attention"][0], 1.0)  # the median block
        self.assertAlmostEqual(s["segments"]["attention"][1], 5.0)  # the slowest block
        # 14 spans of 1 us plus the gap to the next layer; block 0's extra 4 us is not the median
        self.assertAlmostEqual(s["layer_us"], 15.0)
        self.assertAlmostEqual(s["phases"]["qkv"]["consumer_wait_data_us"], 1.0)
        self.assertAlmostEqual(s["phases"]["down"]["consumer_wait_data_us"], 4.0)
        self.assertAlmostEqual(s["phases"]["o"]["producer_wait_free_us"], 4.0)
        self.assertAlmostEqual(s["phases"]["attention"]["consumer_wait_data_us"], 5.0)
        self.assertIsNone(s["phases"]["attention"]["producer_wait_free_us"])

    def test_slowest_blocks_of_a_segment(self):
        rows = ft.slowest(*ft.parse(record(3, 4, 5)), "attention")
        self.assertEqual([b for b, _ in rows], [0, 1, 2])  # block 0 is slow, then ties by block index
        self.assertAlmostEqual(rows[0][1], 5.0)
        self.assertAlmostEqual(rows[1][1], 1.0)
        self.assertAlmostEqual(ft.slowest(*ft.parse(record(3, 4, 5)), "attention", layer=0)[0][1], 5.0)
        with self.assertRaises(SystemExit):
            ft.slowest(*ft.parse(record(3, 4, 5)), "no_such_segment")

    def test_command_line_prints_the_table(self):
        with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
            f.write(record(2, 3, 1))
        try:
            out = subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True, check=True)
            self.assertIn("3 layers", out.stdout)
            self.assertIn("attention", out.stdout)
            self.assertIn("gate_up", out.stdout)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
