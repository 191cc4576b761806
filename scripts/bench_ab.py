#!/usr/bin/env python3
"""A/B runs of `bunsen benchmark` inside one session: every case is the same benchmark under its own environment
switches, run in alternation (rep 1 of every case, then rep 2, ...) so that the machine's drift between runs
falls on all cases alike. Prints one row per case (each rep's decode tok/s, the mean, ms/token, the change against
the first case) and writes every run's JSON plus a summary.

  scripts/bench_ab.py --args "--device cuda --synthetic llama3.1-8b --prompt-len 1024 --gen 128 --no-probe" \\
      --reps 2 --out ab_8b  off:BUNSEN_FUSED_NORM=0  on:BUNSEN_FUSED_NORM=1  on_pf64:BUNSEN_FUSED_NORM=1,BUNSEN_L2_PREFETCH=64

A case is LABEL[:VAR=VALUE[,VAR=VALUE...]] (no switch: the defaults). --metric picks the JSON field compared
(default decode_tok_s; higher is better). A run that fails or times out is reported and counted as missing;
the exit status is 1 when any run failed.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def parse_case(text):
    label, _, envs = text.partition(":")
    if not label or "/" in label:
        raise ValueError(f"bad case {text!r}: LABEL[:VAR=VALUE,...]")
    env = {}
    for item in filter(None, envs.split(",")):
        var, eq, value = item.partition("=")
        if not eq or not var:
            raise ValueError(f"bad switch {item!r} in case {text!r}: VAR=VALUE")
        env[var] = value
    return label, env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="LABEL[:VAR=VALUE,...]")
    ap.add_argument("--args", required=True, help="the benchmark's arguments (--json is added)")
    ap.add_argument("--bunsen", default=os.environ.get("BUNSEN", "build/bunsen"), help="the binary")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="bench_ab", help="directory for LABEL_REP.json and summary.json")
    ap.add_argument("--metric", default="decode_tok_s")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    a = ap.parse_args()
    try:
        cases = [parse_case(c) for c in a.cases]
    except ValueError as e:
        ap.error(str(e))
    labels = [c[0] for c in cases]
    if len(set(labels)) != len(labels):
        ap.error("case labels must differ")
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    runs = {label: [] for label in labels}  # label -> [(metric, ms_per_token) or None per rep]
    failed = 0
    for rep in range(1, a.reps + 1):
        for label, env in cases:
            cmd = [a.bunsen, "benchmark", *shlex.split(a.args), "--json"]
            path = os.path.join(a.out, f"{label}_{rep}.json")
            try:
                p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                                   timeout=a.timeout)
                ok, out, err = p.returncode == 0, p.stdout, p.stderr
            except subprocess.TimeoutExpired:
                ok, out, err = False, "", f"timed out after {a.timeout:g} s"
            value = None
            if ok:
                try:
                    j = json.loads(out)
                    value = (float(j[a.metric]), float(j.get("ms_per_token", 0.0)))
                    with open(path, "w") as f:
                        f.write(out)
                except (ValueError, KeyError) as e:
                    err = f"no {a.metric} in the output ({e})"
            if value is None:
                failed += 1
                print(f"{label} rep {rep}: FAILED: {err.strip().splitlines()[-1] if err.strip() else 'no output'}",
                      file=sys.stderr)
            runs[label].append(value)
            sys.stdout.flush()
    summary = []
    base = None
    for label, env in cases:
        got = [v for v in runs[label] if v is not None]
        mean = sum(v[0] for v in got) / len(got) if got else None
        ms = sum(v[1] for v in got) / len(got) if got else None
        if base is None:
            base = mean
        change = (mean / base - 1) * 100 if mean is not None and base else None
        summary.append({"label": label, "env": env, a.metric: [v[0] if v else None for v in runs[label]],
                        "mean": mean, "ms_per_token": ms, "change_pct": change})
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"args": a.args, "metric": a.metric, "reps": a.reps, "cases": summary}, f, indent=1)
    width = max(len(label) for label in labels)
    print(f"{'case':<{width}}  {a.metric + ' per rep':<27}  {'mean':>9}  {'ms/token':>8}  vs {labels[0]}")
    for s in summary:
        reps = " ".join(f"{v:9.1f}" if v is not None else "   FAILED" for v in s[a.metric])
        mean = f"{s['mean']:9.1f}" if s["mean"] is not None else "        -"
        ms = f"{s['ms_per_token']:8.3f}" if s["ms_per_token"] is not None else "       -"
        change = f"{s['change_pct']:+6.1f} %" if s["change_pct"] is not None else "      -"
        print(f"{s['label']:<{width}}  {reps:<27}  {mean}  {ms}  {change}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
