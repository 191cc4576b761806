#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_tokenizer into tests/fuzz/corpus/tokenizer/.

Small tokenizer.json files (a few KB at most, never the 11-33 MB real ones) covering every model type
and component: the whole-tokenizer configurations HF accepted in tests/unit/text/data/hf_component_cases.jsonl
(BPE unk/fuse_unk/byte fallback/prefix/suffix/ignore_merges, WordPiece, Unigram, Mistral/Llama-2-like,
byte-level with added tokens) plus one file per normalizer, pre-tokenizer and decoder configuration seen
there, each around a tiny byte-level BPE. Invariant: deterministic, so re-running leaves the corpus as is.
"""
import hashlib
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "tokenizer")
CASES = os.path.join(HERE, "..", "unit", "text", "data", "hf_component_cases.jsonl")


def tiny(**parts):
    vocab = {c: i for i, c in enumerate("abcdefgh")}
    vocab.update({"ab": 8, "abc": 9, "\u0120": 10, "\u0120a": 11, "<unk>": 12})
    tok = {"version": "1.0", "added_tokens": [{"id": 13, "content": "<s>", "special": True, "normalized": False,
                                               "lstrip": False, "rstrip": False, "single_word": False}],
           "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "model": {"type": "BPE", "unk_token": "<unk>", "vocab": vocab,
                     "merges": [["a", "b"], ["ab", "c"], ["\u0120", "a"]]}}
    tok.update(parts)
    return tok


def main():
    os.makedirs(OUT, exist_ok=True)
    seen = {}
    with open(CASES, encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            if "error" in c:
                continue
            if c["kind"] == "tokenizer":
                tok = c["config"]
            else:
                tok = tiny(**{c["kind"]: c["config"]})
            text = json.dumps(tok, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
            name = c.get("name") or c["config"].get("type", "x")
            seen.setdefault(text, f"{c['kind']}_{name}")
    for text, stem in sorted(seen.items(), key=lambda kv: kv[1] + kv[0]):
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        with open(os.path.join(OUT, f"{stem}_{digest}.json"), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"{len(seen)} files in {OUT}")


if __name__ == "__main__":
    main()
