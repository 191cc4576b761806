#!/usr/bin/env python3
"""scripts/serve_model.py (a step-cost model of closed-loop serving) on cases whose answer is known by hand:
one request is one prefill step plus gen - 1 decode steps, every request's tokens are counted once, a budget
smaller than the prompt chunks it, clients send their next request only when the last ends, a quantized KV
cache costs less, the FLOPs bound holds (also at a measured matmul rate), and bad arguments are refused."""
import importlib.util
import json
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "serve_model.py")
spec = importlib.util.spec_from_file_location("serve_model", SCRIPT)
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)


class ServeModel(unittest.TestCase):
    def test_one_request_is_one_prefill_step_then_decode_steps(self):
        r = model.simulate(2048, 1, 1, 1024, 256, "h100", 0.5)
        self.assertEqual(r["steps"], 256)  # the prompt's step samples token 1; 255 decode steps follow
        self.assertAlmostEqual(r["output_tok_s"] * r["seconds"], 256)
        self.assertEqual(r["decode_rows_in_prefill_steps"], 0.0)

    def test_a_small_budget_chunks_the_prompt(self):
        r = model.simulate(256, 1, 1, 1024, 8, "h100", 0.5)
        self.assertEqual(r["steps"], 4 + 7)  # 4 chunks of 256, then 7 decode steps

    def test_closed_loop_counts_every_request_once(self):
        for mbt in (512, 2048):
            r = model.simulate(mbt, 4, 10, 100, 20, "h200", 0.5)
            self.assertAlmostEqual(r["output_tok_s"] * r["seconds"], 10 * 20)
        # one stream: the requests run one after another, so ten requests take ten times one request's steps
        one = model.simulate(2048, 1, 1, 100, 20, "h100", 0.5)
        ten = model.simulate(2048, 1, 10, 100, 20, "h100", 0.5)
        self.assertEqual(ten["steps"], 10 * one["steps"])

    def test_decode_rows_ride_in_prefill_steps_only_with_several_streams(self):
        r = model.simulate(512, 8, 16, 1024, 64, "h100", 0.5)
        self.assertGreater(r["decode_rows_in_prefill_steps"], 0.0)
        self.assertLessEqual(r["decode_rows_in_prefill_steps"], 1.0)

    def test_a_smaller_kv_cache_reads_faster(self):
        t = {kv: model.simulate(2048, 16, 32, 512, 64, "h100", 0.5, kv)["seconds"] for kv in ("off", "8", "fp8", "4")}
        self.assertLess(t["4"], t["fp8"])
        self.assertLess(t["fp8"], t["8"])
        self.assertLess(t["8"], t["off"])

    def test_compute_bound(self):
        # one prompt token, one output token: the layers' matmuls once and the head once, no attention
        layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336
        self.assertEqual(model.flops_per_output_token(1, 1), 2 * 32 * layer + 2 * 128256 * 4096)
        # every simulated run is slower than its FLOPs at the card's matmul rate
        for streams in (1, 64):
            r = model.simulate(2048, streams, 2 * streams, 1024, 256, "h200", 0.0, "4")
            bound = model.CARDS["h200"]["tflops"] * 1e12 / model.flops_per_output_token(1024, 256)
            self.assertLess(r["output_tok_s"], bound)

    def test_bad_arguments_are_refused(self):
        p = subprocess.run([sys.executable, SCRIPT, "--mbt", "0"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("must be positive", p.stderr)
        p = subprocess.run([sys.executable, SCRIPT, "--probe-tflops", "-1"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--probe-tflops must be >= 0", p.stderr)

    def test_bound_at_a_measured_matmul_rate(self):
        # 725 TFLOP/s over the 1,024-in / 256-out workload's FLOPs per output token
        p = subprocess.run([sys.executable, SCRIPT, "--mbt", "2048", "--probe-tflops", "725", "--json"],
                           capture_output=True, text=True, check=True)
        out = json.loads(p.stdout)
        self.assertAlmostEqual(out["bound_at_probe_tok_s"], 725e12 / model.flops_per_output_token(1024, 256))
        p = subprocess.run([sys.executable, SCRIPT, "--mbt", "2048", "--json"], capture_output=True, text=True,
                           check=True)
        self.assertNotIn("bound_at_probe_tok_s", json.loads(p.stdout))


if __name__ == "__main__":
    unittest.main()
