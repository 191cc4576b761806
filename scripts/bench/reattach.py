#!/usr/bin/env python3
"""Prefix-cache re-attach benchmark (issue 7): a long conversation re-sent after a server restart.

  python3 scripts/bench/reattach.py --bunsen build/bunsen --synthetic llama3.1-8b --tokens 13700 \
      --ssd-dir /tmp/bunsen-ssd --json out.json [-- extra serve flags]

Steps, each against a real `bunsen serve` process:
  1. cold: a fresh server with an empty --ssd-cache DIR; the conversation (random token ids) plus one more
     turn is sent once: TTFT of the whole prefill (the prompt is new to every tier).
  2. the server snapshots the conversation to DIR (polled through /stats until ssd.writes grows), then is
     stopped (SIGTERM) and started again on the same DIR.
  3. warm: the conversation continued (the first request's prompt plus a new turn, as an agent resends it):
     TTFT and usage.prompt_tokens_details.cached_tokens (the SSD tier restores the prefix; only the new turn
     is prefilled).
  4. decode: `bunsen benchmark --serve` at concurrency 1 against the server with the SSD tier on and
     against one without it; output tok/s and inter-token latency side by side.
Only the Python standard library is used (it runs on the GPU machine as is).
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, ssd_dir, log_name):
        self.port = free_port()
        cmd = [args.bunsen, "serve", "--synthetic", args.synthetic, "--device", args.device,
               "--port", str(self.port), "--ctx", str(args.tokens + 1024), "--log-level", "info"]
        if ssd_dir:
            cmd += ["--ssd-cache", ssd_dir]
        cmd += args.serve_args
        self.log = open(os.path.join(args.log_dir, log_name), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        t0 = time.time()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() - t0 > args.start_timeout:
                raise RuntimeError("server did not become healthy")
            time.sleep(0.2)
        self.startup_s = time.time() - t0

    def stats(self):
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r:
            return json.load(r)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def completion(url, prompt, max_tokens=1):
    """Streams one completion; returns (ttft_s, total_s, usage)."""
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, usage = None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ttft is None and ev.get("choices"):
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                usage = ev["usage"]
    return ttft, time.perf_counter() - t0, usage


def settle(server, min_bytes, timeout):
    """Waits until the SSD tier holds at least min_bytes and its write count has not changed for 1.5 s."""
    t0, last, since = time.time(), None, time.time()
    while time.time() - t0 < timeout:
        ssd = server.stats().get("ssd", {})
        state = (ssd.get("writes", 0), ssd.get("bytes", 0))
        if state != last:
            last, since = state, time.time()
        elif state[1] >= min_bytes and time.time() - since >= 1.5:
            return time.time() - t0, ssd
        time.sleep(0.1)
    raise RuntimeError(f"the SSD tier did not settle at >= {min_bytes} bytes: {last}")


def serve_bench(args, url):
    out = subprocess.run([args.bunsen, "benchmark", "--serve", url, "--concurrency", "1", "--requests",
                          str(args.decode_requests), "--prompt-len", "512", "--gen", str(args.decode_gen), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bunsen", default="build/bunsen")
    p.add_argument("--synthetic", default="llama3.1-8b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokens", type=int, default=13700, help="conversation length in tokens")
    p.add_argument("--turn", type=int, default=64, help="tokens of the new turn appended to it")
    p.add_argument("--vocab", type=int, default=120000, help="token ids are drawn below this")
    p.add_argument("--ssd-dir", default="/tmp/bunsen-reattach-ssd")
    p.add_argument("--log-dir", default=".")
    p.add_argument("--start-timeout", type=float, default=300)
    p.add_argument("--decode-requests", type=int, default=6)
    p.add_argument("--decode-gen", type=int, default=256)
    p.add_argument("--no-decode", action="store_true", help="skip the decode comparison")
    p.add_argument("--json", help="write the result here too")
    p.add_argument("serve_args", nargs="*", help="extra flags for bunsen serve (after --)")
    args = p.parse_args()

    rng = random.Random(7)
    conv = [rng.randrange(1000, args.vocab) for _ in range(args.tokens)]
    turn1 = [rng.randrange(1000, args.vocab) for _ in range(args.turn)]
    turn2 = [rng.randrange(1000, args.vocab) for _ in range(args.turn)]
    shutil.rmtree(args.ssd_dir, ignore_errors=True)
    os.makedirs(args.ssd_dir)
    res = {"shape": args.synthetic, "device": args.device, "conversation_tokens": args.tokens,
           "new_turn_tokens": args.turn}

    s = Server(args, args.ssd_dir, "reattach_serve_cold.log")
    res["startup_s"] = s.startup_s
    completion(s.url, [rng.randrange(1000, args.vocab) for _ in range(256)])  # warm-up (graphs, cuBLAS)
    _, ssd0 = settle(s, 1, 60)
    ttft, total, usage = completion(s.url, conv + turn1)
    res["cold_ttft_s"] = ttft
    res["cold_usage"] = usage
    # The conversation's snapshot is far larger than the warm-up's (a few hundred KB per 1k tokens at least).
    res["snapshot_wait_s"], res["ssd_after_cold"] = settle(s, ssd0["bytes"] + 64 * args.tokens, 300)
    s.stop()

    s = Server(args, args.ssd_dir, "reattach_serve_warm.log")
    res["restart_s"] = s.startup_s
    completion(s.url, [rng.randrange(1000, args.vocab) for _ in range(256)])  # same warm-up, no shared prefix
    ttft, total, usage = completion(s.url, conv + turn1 + turn2)
    res["warm_ttft_s"] = ttft
    res["warm_usage"] = usage
    res["cached_tokens"] = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
    res["ssd_after_warm"] = s.stats().get("ssd")
    res["ttft_ratio"] = res["warm_ttft_s"] / res["cold_ttft_s"]
    warm_ssd = res["ssd_after_warm"] or {}
    if warm_ssd.get("restore_s"):  # restore jobs: payload bytes over the seconds they took
        res["restore_s"] = warm_ssd["restore_s"]
        res["restored_gb"] = warm_ssd.get("restored_bytes", 0) / 1e9
        res["restore_gb_s"] = res["restored_gb"] / warm_ssd["restore_s"]
    if not args.no_decode:
        res["decode_ssd_on"] = serve_bench(args, s.url)
    s.stop()
    if not args.no_decode:
        s = Server(args, None, "reattach_serve_off.log")
        res["decode_ssd_off"] = serve_bench(args, s.url)
        s.stop()
        on, off = res["decode_ssd_on"], res["decode_ssd_off"]
        # Decode speed = 1 / inter-token latency (TTFT, which includes the prefill, left out).
        res["decode_tok_s_on"] = 1000.0 / on["itl_ms"]["mean"]
        res["decode_tok_s_off"] = 1000.0 / off["itl_ms"]["mean"]
        res["decode_on_vs_off"] = res["decode_tok_s_on"] / res["decode_tok_s_off"]
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
