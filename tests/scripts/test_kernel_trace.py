#!/usr/bin/env python3
"""scripts/kernel_trace.py on hand-made timelines: step splitting, graph choice, marginal times (the part of a
step's span each kernel adds, idle gaps charged to the kernel after them), --skip, --by-shape, --baseline and
errors."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "kernel_trace.py")
HEADER = "start_ns,end_ns,graph,stream,grid,block,smem,regs,name\n"


def write(rows, path):
    with open(path, "w") as f:
        f.write(HEADER)
        for start, end, graph, grid, name in rows:
            f.write(f'{start},{end},{graph},7,{grid},256,0,32,"{name}"\n')


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True)


def steps(n, t0=1_000_000, period=100_000):
    """n steps of graph 5: a GEMV (0-5 us), a norm overlapping its tail (4-6 us), an idle gap of 1 us, then
    attention (7-10 us). Marginals: GEMV 5, norm 1, attention 4 (1 idle + 3); span 10 us."""
    rows = []
    for i in range(n):
        t = t0 + i * period
        rows += [(t, t + 5000, 5, 128, "void bunsen::kernels::cuda::(anonymous namespace)::gemv<1>"),
                 (t + 4000, t + 6000, 5, 1, "rms_norm"),
                 (t + 7000, t + 10000, 5, 264, "attn")]
    return rows


class KernelTrace(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.csv")

    def tearDown(self):
        self.dir.cleanup()

    def table(self, rows, *args):
        write(rows, self.path)
        r = run(self.path, "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = json.loads(r.stdout)
        return d, {k["name"]: k for k in d["kernels"]}

    def test_marginals_sum_to_the_span_and_charge_idle_gaps(self):
        d, k = self.table(steps(5))
        self.assertEqual(d["graph"], 5)
        self.assertEqual(d["steps"], 3)  # 5 steps, the first 2 skipped
        self.assertEqual(d["kernels_per_step"], 3)
        self.assertAlmostEqual(d["span_us"], 10.0)
        self.assertAlmostEqual(k["gemv<1>"]["marginal_us"], 5.0)  # namespaces stripped from the name
        self.assertAlmostEqual(k["rms_norm"]["marginal_us"], 1.0)
        self.assertAlmostEqual(k["rms_norm"]["duration_us"], 2.0)
        self.assertAlmostEqual(k["attn"]["marginal_us"], 4.0)
        self.assertAlmostEqual(sum(v["marginal_us"] for v in k.values()), d["span_us"])

    def test_the_graph_with_most_kernels_is_chosen_and_others_are_ignored(self):
        rows = steps(4) + [(50, 60, 0, 1, "outside a graph")] * 20
        rows += [(9_000_000 + i * 100_000, 9_000_000 + i * 100_000 + 400, 9, 1, "prefill") for i in range(3)]
        d, k = self.table(rows)
        self.assertEqual(d["graph"], 5)
        self.assertEqual(set(k), {"gemv<1>", "rms_norm", "attn"})
        d, k = self.table(rows, "--graph", "9", "--skip", "0")
        self.assertEqual((d["steps"], set(k)), (3, {"prefill"}))
        self.assertAlmostEqual(d["span_us"], 0.4)

    def test_skip_and_gap_threshold(self):
        d, _ = self.table(steps(6), "--skip", "0")
        self.assertEqual(d["steps"], 6)
        # With a threshold above the 90 us between steps, everything is one step.
        d, _ = self.table(steps(6), "--skip", "0", "--gap-us", "200")
        self.assertEqual((d["steps"], d["kernels_per_step"]), (1, 18))

    def test_by_shape_separates_launches_of_one_kernel(self):
        rows = []
        for i in range(4):
            t = 1_000_000 + i * 100_000
            rows += [(t, t + 3000, 5, 192, "gemv"), (t + 3000, t + 8000, 5, 256, "gemv")]
        d, k = self.table(rows, "--by-shape")
        self.assertAlmostEqual(k["gemv [grid 192 x 256, smem 0]"]["marginal_us"], 3.0)
        self.assertAlmostEqual(k["gemv [grid 256 x 256, smem 0]"]["marginal_us"], 5.0)
        _, k = self.table(rows)
        self.assertAlmostEqual(k["gemv"]["per_step"], 2.0)

    def test_baseline_compares_two_traces(self):
        base = os.path.join(self.dir.name, "base.csv")
        write(steps(5), base)
        # The new trace: attention 1 us shorter (7-9 us), so the span is 9 us and attention's marginal 3.
        new = [(s, e - 1000 if name == "attn" else e, g, grid, name) for s, e, g, grid, name in steps(5)]
        d, k = self.table(new, "--baseline", base)
        self.assertAlmostEqual(d["span_us"], 9.0)
        self.assertAlmostEqual(d["baseline"]["span_us"], 10.0)
        self.assertAlmostEqual(k["attn"]["marginal_us"], 3.0)
        r = run(self.path, "--baseline", base)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("10.0 us (baseline) -> 9.0 us (-1.0)", r.stdout)
        first = r.stdout.splitlines()[2]  # the largest change comes first
        self.assertTrue(first.startswith("attn") and first.rstrip().endswith("-1.0"), first)

    def test_whole_run_counts_busy_idle_and_every_kernel(self):
        # Eager prefill kernels (graph 0) overlapping, a 50 us gap, a graph kernel, a 190 us gap, one more eager.
        rows = [(0, 100_000, 0, 1, "a"), (50_000, 150_000, 0, 1, "b"), (200_000, 210_000, 5, 1, "c"),
                (400_000, 500_000, 0, 1, "a"), (500_005, 500_010, 0, 1, "a")]
        write(rows, self.path)
        r = run(self.path, "--whole", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        w = json.loads(r.stdout)
        self.assertAlmostEqual(w["wall_us"], 500.01)
        self.assertAlmostEqual(w["idle_us"], 240.0)  # 50 + 190; the 5 ns gap is below --gap-us
        self.assertEqual((w["gaps"], w["steps"]), (2, 3))
        self.assertAlmostEqual(w["in_graph_us"], 10.0)
        self.assertEqual(w["kernels"]["a"][0], 3)
        self.assertAlmostEqual(w["kernels"]["a"][2], 200.005)  # marginals: no idle time charged
        self.assertAlmostEqual(w["kernels"]["b"][2], 50.0)
        self.assertAlmostEqual(sum(v[2] for v in w["kernels"].values()), w["wall_us"] - w["idle_us"] - 0.005)
        # A start-up before a long wait is left out with --after-idle-ms.
        write([(0, 1000, 0, 1, "startup"), (2_000_000_000, 2_000_001_000, 0, 1, "a")] + [
            (s + 2_000_031_000, e + 2_000_031_000, g, grid, n) for s, e, g, grid, n in rows], self.path)
        r = run(self.path, "--whole", "--json", "--after-idle-ms", "500")
        self.assertEqual(r.returncode, 0, r.stderr)
        w2 = json.loads(r.stdout)
        self.assertNotIn("startup", w2["kernels"])
        self.assertEqual(w2["kernels"]["a"][0], 4)
        self.assertAlmostEqual(w2["idle_us"], w["idle_us"] + 30.0)  # the 30 us gap before the rows above
        write(rows, self.path)
        r = run(self.path, "--whole", "--gap-us", "100")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("idle in 1 gaps", r.stdout)
        self.assertTrue(r.stdout.splitlines()[2].startswith("a "), r.stdout)

    def test_errors(self):
        r = run(os.path.join(self.dir.name, "missing.csv"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no such trace", r.stderr)
        write([], self.path)
        self.assertNotEqual(run(self.path).returncode, 0)
        write([(1, 2, 0, 1, "eager")], self.path)
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no kernel ran inside a CUDA graph", r.stderr)
        write(steps(2), self.path)
        r = run(self.path)  # two steps, both skipped
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no steps left", r.stderr)


if __name__ == "__main__":
    unittest.main()
