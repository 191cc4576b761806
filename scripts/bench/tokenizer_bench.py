#!/usr/bin/env python3
# Tokenizer encode throughput, bunsen vs Hugging Face `tokenizers`, single thread, same machine, same
# tokenizer.json, same input. Not a test: it prints and saves figures (docs/PERFORMANCE.md records them).
# Input: a deterministic >= 10 MB mixed corpus (English prose, code, CJK, Japanese, Korean, Cyrillic,
# Greek, Arabic, Hindi, emoji with ZWJ/skin tones, numbers, markdown, whitespace runs), encoded two ways:
# as one long document, and line by line (many short strings). HF runs with RAYON_NUM_THREADS=1 and
# TOKENIZERS_PARALLELISM=false; bunsen runs `bunsen tokenize --bench FILE` (one thread by construction).
# Both report the best of N passes (caches warm after the first). Token counts must agree (exactness).
#   python3 scripts/bench/tokenizer_bench.py --bunsen BIN --tokenizer qwen3=DIR --tokenizer llama3=DIR
#   python3 scripts/bench/tokenizer_bench.py --corpus-only --out /tmp/bench   (just write the corpus)
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

TARGET_BYTES = 10_500_000

WORDS = (
    "the of and to in is was that for on with as by at from it an be this are or which his her had not but "
    "have they you were their one all we can been has more when there will would who so if out up about "
    "into than them some could time only other new these two may first then do any like my now over such "
    "our man me even most made after also did many before must through years where much your way well down "
    "should because each just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three model token engine memory kernel tensor "
    "throughput latency cache request stream server library function value pointer vector matrix batch"
).split()
NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory"]
IDENTS = ["x", "y", "idx", "count", "buffer", "result", "tokens", "n_heads", "head_dim", "ctx", "self", "data"]


def word_from(r, lo, hi, n_min=2, n_max=9):
    return "".join(chr(r.randint(lo, hi)) for _ in range(r.randint(n_min, n_max)))


def prose(r):
    out = []
    for _ in range(r.randint(3, 12)):
        words = [r.choice(WORDS) for _ in range(r.randint(5, 25))]
        if r.random() < 0.3:
            words.insert(r.randrange(len(words)), r.choice(NAMES))
        if r.random() < 0.2:
            words.insert(r.randrange(len(words)), str(r.randint(0, 100000)))
        s = " ".join(words)
        s = s[0].upper() + s[1:] + r.choice([".", ".", ".", "?", "!", ";", ":"])
        if r.random() < 0.15:
            s = s.replace(" ", ", ", 1)
        if r.random() < 0.1:
            s = '"' + s + '" she said.'
        if r.random() < 0.1:
            s = s.replace("not", "n't").replace("it is", "it's")
        out.append(s)
    return " ".join(out)


def code(r):
    name = r.choice(IDENTS) + "_" + r.choice(WORDS)
    a, b = r.choice(IDENTS), r.choice(IDENTS)
    snippets = [
        f"def {name}({a}, {b}=None):\n    if {b} is None:\n        {b} = []\n    for i in range(len({a})):\n"
        f"        {b}.append({a}[i] * {r.randint(2, 99)})\n    return {b}\n",
        f"int {name}(const std::vector<float>& {a}, int {b}) {{\n  float acc = 0.0f;\n"
        f"  for (int i = 0; i < {b}; ++i) acc += {a}[i] * {r.random():.4f}f;\n  return static_cast<int>(acc);\n}}\n",
        f"const {name} = async ({a}) => {{\n\tconst res = await fetch(`/api/{r.choice(WORDS)}?id=${{{a}}}`);\n"
        f"\treturn res.json(); // {r.choice(WORDS)}\n}};\n",
        f'{{"{r.choice(WORDS)}": {r.randint(0, 9999)}, "{r.choice(WORDS)}": [{r.random():.3f}, null, true], '
        f'"name": "{r.choice(NAMES)}"}}\n',
        f"SELECT {a}, COUNT(*) FROM {name} WHERE {b} >= {r.randint(1, 500)} GROUP BY {a} ORDER BY 2 DESC;\n",
    ]
    return r.choice(snippets)


def cjk(r):
    chars = []
    for _ in range(r.randint(20, 200)):
        x = r.random()
        if x < 0.85:
            chars.append(chr(r.randint(0x4E00, 0x62FF)))
        elif x < 0.95:
            chars.append(r.choice("，。、！？：；「」（）"))
        else:
            chars.append(str(r.randint(0, 99)))
    return "".join(chars)


def other_scripts(r):
    kind = r.randrange(7)
    if kind == 0:  # Japanese: kana + kanji
        return "".join(chr(r.randint(0x3041, 0x3096)) if r.random() < 0.6 else chr(r.randint(0x4E00, 0x5FFF))
                       for _ in range(r.randint(20, 120))) + "。"
    ranges = [(0xAC00, 0xD7A3), (0x430, 0x44F), (0x3B1, 0x3C9), (0x627, 0x64A), (0x915, 0x939), (0xE01, 0xE2E)]
    lo, hi = ranges[kind - 1]
    words = [word_from(r, lo, hi) for _ in range(r.randint(5, 30))]
    if kind == 5:  # Devanagari with vowel signs
        words = [w + chr(r.choice([0x93E, 0x93F, 0x940, 0x947, 0x94B])) for w in words]
    sep = "" if kind == 6 else " "  # Thai has no spaces
    return sep.join(words) + "."


def emoji(r):
    out = []
    for _ in range(r.randint(1, 12)):
        x = r.random()
        if x < 0.5:
            out.append(chr(r.randint(0x1F600, 0x1F64F)))
        elif x < 0.7:
            out.append(chr(r.choice([0x1F44D, 0x1F44B, 0x1F64F])) + chr(r.randint(0x1F3FB, 0x1F3FF)))
        elif x < 0.85:
            out.append("\U0001F468\u200D\U0001F469\u200D\U0001F467")
        else:
            out.append(r.choice(WORDS))
    return " ".join(out)


def markdown(r):
    return (f"## {prose(r)[:40]}\n\n- **{r.choice(WORDS)}**: {r.randint(1, 100)}%\n- `{r.choice(IDENTS)}`\n\n"
            f"| a | b |\n|---|---|\n| {r.random():.2f} | {r.choice(WORDS)} |\n")


def make_corpus(seed=1234):
    r = random.Random(seed)
    kinds = [(prose, 40), (code, 20), (cjk, 12), (other_scripts, 12), (emoji, 4), (markdown, 6)]
    total = sum(w for _, w in kinds)
    parts, size = [], 0
    while size < TARGET_BYTES:
        pick, acc = r.uniform(0, total), 0
        for fn, w in kinds:
            acc += w
            if pick <= acc:
                break
        s = fn(r) + r.choice(["\n", "\n", "\n\n", "\n", " \n", "\n\n\n", "\n    \n"])
        parts.append(s)
        size += len(s.encode("utf-8"))
    return "".join(parts)


def hf_bench(tok_dir, doc, lines, repeat):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    doc_bytes = len(doc.encode("utf-8"))
    line_bytes = sum(len(s.encode("utf-8")) for s in lines)

    def best(fn):
        times, out = [], None
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return min(times), times[0], out

    res = {}
    s, first, enc = best(lambda: tok.encode(doc, add_special_tokens=False))
    res["document"] = {"bytes": doc_bytes, "tokens": len(enc.ids), "seconds": s, "first_seconds": first}
    s, first, encs = best(lambda: tok.encode_batch(lines, add_special_tokens=False))
    res["lines_encode_batch"] = {"bytes": line_bytes, "tokens": sum(len(e.ids) for e in encs), "seconds": s,
                                 "first_seconds": first}
    if hasattr(tok, "encode_batch_fast"):
        s, first, encs = best(lambda: tok.encode_batch_fast(lines, add_special_tokens=False))
        res["lines_encode_batch_fast"] = {"bytes": line_bytes, "tokens": sum(len(e.ids) for e in encs),
                                          "seconds": s, "first_seconds": first}
    for v in res.values():
        v["mb_per_s"] = v["bytes"] / 1e6 / v["seconds"]
        v["tokens_per_s"] = v["tokens"] / v["seconds"]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bunsen", help="bunsen binary (needs the `tokenize --bench` mode)")
    ap.add_argument("--tokenizer", action="append", default=[], help="NAME=DIR with tokenizer.json")
    ap.add_argument("--out", default=".", help="directory for corpus.txt and bench.json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--corpus-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    doc = make_corpus()
    corpus_path = os.path.join(args.out, "corpus.txt")
    with open(corpus_path, "w", encoding="utf-8") as f:
        f.write(doc)
    lines = [s for s in doc.split("\n") if s]
    print(f"corpus: {len(doc.encode('utf-8')) / 1e6:.2f} MB, {len(lines)} non-empty lines -> {corpus_path}")
    if args.corpus_only:
        return
    results = {"corpus_bytes": len(doc.encode("utf-8")), "lines": len(lines), "tokenizers": {}}
    for spec in args.tokenizer:
        name, tok_dir = spec.split("=", 1)
        entry = {"hf": hf_bench(tok_dir, doc, lines, args.repeat)}
        if args.bunsen:
            p = subprocess.run([args.bunsen, "tokenize", "--model", tok_dir, "--bench", corpus_path,
                                "--repeat", str(args.repeat)], capture_output=True, text=True, check=True)
            entry["bunsen"] = json.loads(p.stdout)
            b, h = entry["bunsen"], entry["hf"]
            hf_lines = max((v for k, v in h.items() if k.startswith("lines")), key=lambda v: v["mb_per_s"])
            entry["speedup"] = {"document": b["document"]["mb_per_s"] / h["document"]["mb_per_s"],
                                "lines": b["lines"]["mb_per_s"] / hf_lines["mb_per_s"]}
            entry["same_token_counts"] = {"document": b["document"]["tokens"] == h["document"]["tokens"],
                                          "lines": b["lines"]["tokens"] == hf_lines["tokens"]}
        results["tokenizers"][name] = entry
        print(json.dumps({name: entry}, indent=1))
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    for name, e in results["tokenizers"].items():
        h = e["hf"]
        line = f"{name}: HF document {h['document']['mb_per_s']:.2f} MB/s"
        for k, v in h.items():
            if k.startswith("lines"):
                line += f", HF {k} {v['mb_per_s']:.2f} MB/s"
        if "bunsen" in e:
            b = e["bunsen"]
            line += (f" | bunsen document {b['document']['mb_per_s']:.2f} MB/s, lines {b['lines']['mb_per_s']:.2f} MB/s"
                     f" | speedup {e['speedup']['document']:.2f}x / {e['speedup']['lines']:.2f}x"
                     f" | same counts {e['same_token_counts']}")
        print(line)


if __name__ == "__main__":
    main()
