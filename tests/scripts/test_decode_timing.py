#!/usr/bin/env python3
"""scripts/decode_timing.py on hand-made block records: launch grouping per layer, warm-up skip, the median block
and the straggler's phases, SM sharing, the combine grid on the slice launch's clock, and errors."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "decode_timing.py")
HEADER = "kind,layer,x,y,z,smid,keys,t0,t1,t2,t3,t4\n"


def launch(layer, t, n_blocks=5):
    """Slice blocks z = 0..n-1 on SMs 0..n-1 entering at t + 100 z ns; the wait returns at t + 2 us, the first tile
    at + 3 us, the loop ends at + 4 us, exit at + 5 us, except block z = 1 (the straggler), whose loop ends at
    + 9 us and exit at + 10 us, on SM 0 (shared with z = 0). Combine: 2 blocks entering at t + 1 us, waiting until
    t + 10.5 us, exiting at t + 12 us."""
    rows = []
    for z in range(n_blocks):
        straggler = z == 1
        rows.append(("slice", layer, 0, 0, z, 0 if straggler else z, 64, t + 100 * z, t + 2000, t + 3000,
                     t + (9000 if straggler else 4000), t + (10000 if straggler else 5000)))
    for x in range(2):
        rows.append(("combine", layer, x, 0, 0, 7, 5, t + 1000, t + 10500, t + 11000, t + 11500, t + 12000))
    return rows


def write(rows, path):
    with open(path, "w") as f:
        f.write(HEADER)
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True)


class DecodeTiming(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.csv")

    def tearDown(self):
        self.dir.cleanup()

    def steps(self, n, slow_steps=0):
        rows = []
        for step in range(n):
            for layer in range(2):
                t = 1_000_000 + step * 200_000 + layer * 50_000
                rows += launch(layer, t)
                if step < slow_steps:  # a warm-up launch whose last block (z = 4) exits at + 40 us
                    rows[-3] = rows[-3][:11] + (t + 40000,)
        return rows

    def analyse(self, *args):
        r = run(self.path, "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_phases_of_median_block_and_straggler(self):
        write(self.steps(6), self.path)
        s = self.analyse("--skip", "0")
        self.assertEqual(s["launches"], 12)
        self.assertEqual(s["blocks"], 5)
        self.assertAlmostEqual(s["span_us"], 10.0)
        self.assertAlmostEqual(s["straggler_end"], 10.0)
        self.assertAlmostEqual(s["straggler_loop"], 9.0)
        self.assertAlmostEqual(s["straggler_entry"], 0.1)
        self.assertAlmostEqual(s["median_block_end"], 5.0)
        self.assertAlmostEqual(s["straggler_after_median_us"], 5.0)
        self.assertAlmostEqual(s["first_wait_return_us"], 2.0)
        self.assertAlmostEqual(s["last_entry_us"], 0.4)
        self.assertAlmostEqual(s["loop_median_us"], 1.0)
        self.assertAlmostEqual(s["loop_max_us"], 6.0)
        self.assertEqual(s["straggler_shares_sm"], 1.0)
        self.assertEqual(s["straggler_slice_index"], {"1": 12})
        self.assertEqual(s["combine_blocks"], 2)
        self.assertAlmostEqual(s["combine_first_entry_us"], 1.0)
        self.assertAlmostEqual(s["combine_wait_return_us"], 10.5)
        self.assertAlmostEqual(s["combine_end_us"], 12.0)
        self.assertAlmostEqual(s["combine_load_us"], 0.5)
        self.assertAlmostEqual(s["combine_merge_us"], 0.5)

    def test_skip_drops_each_layers_first_launches(self):
        write(self.steps(3, slow_steps=2), self.path)
        s = self.analyse("--skip", "0")
        self.assertEqual(s["launches"], 6)
        self.assertAlmostEqual(s["span_us"], 40.0)  # 4 of 6 launches are slow
        self.assertEqual(s["straggler_slice_index"], {"4": 4, "1": 2})
        s = self.analyse("--skip", "2")
        self.assertEqual(s["launches"], 2)
        self.assertAlmostEqual(s["span_us"], 10.0)  # the slow warm-up launches are gone

    def test_text_report_names_the_straggler(self):
        write(self.steps(3), self.path)
        r = run(self.path, "--skip", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("6 slice launches, 5 blocks each", r.stdout)
        self.assertIn("straggler ends 5.00 us after the median block", r.stdout)
        self.assertIn("per block: loads 0.50, merge 0.50", r.stdout)

    def test_errors(self):
        write([], self.path)
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no block records", r.stderr)
        write(self.steps(2), self.path)
        r = run(self.path, "--skip", "5")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no slice launches left", r.stderr)


if __name__ == "__main__":
    unittest.main()
