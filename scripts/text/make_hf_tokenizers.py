#!/usr/bin/env python3
# Reference data made by Hugging Face `tokenizers` itself (run where `tokenizers` is installed; this repo's
# copy was made with tokenizers 0.23.2 on the GPU machine, which has no internet, so everything is inline):
#  1. trains a WordPiece tokenizer (BertNormalizer + BertPreTokenizer + BertProcessing + WordPiece decoder)
#     and a Unigram tokenizer (NFKC + Metaspace "first" + TemplateProcessing + Metaspace decoder) on the
#     first 900 shared corpus strings, saves them as tests/unit/text/data/hf_{wordpiece,unigram}/tokenizer.json
#     and encodes every string of corpus_texts.jsonl (+ their special tokens inside text) into
#     hf_{wordpiece,unigram}_corpus.jsonl (ids with and without special tokens, decode, skip-special decode);
#  2. cross-checks the @lenml/tokenizers corpora ({qwen3,llama3,gemma3}_corpus.jsonl, make_token_corpus.mjs)
#     against HF on the same tokenizer.json files (--tokdata DIR with NAME/tokenizer.json[.gz]) and writes
#     them back with HF's values wherever the two disagree ("hf_fixed" lists the fields; 0.23.2 found
#     none); a summary goes to crosscheck.json;
#  3. records HF's behaviour of each component on tricky inputs (hf_component_cases.jsonl): normalizers
#     (normalize_str), pre-tokenizers (pre_tokenize_str), decoders (decode) and small whole tokenizers
#     (BPE unk/fuse_unk/byte_fallback/prefix/suffix/ignore_merges, WordPiece, Unigram, added-token flags,
#     post-processors). Not a test: tests/unit/text/test_corpus.cpp and test_hf_components.cpp compare.
# Usage: python3 scripts/text/make_hf_tokenizers.py --out DIR [--tokdata DIR]
import argparse
import gzip
import json
import os
import random
import sys
import traceback
from collections import Counter

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "unit", "text", "data")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")


def special_records(specials, base, seed):
    """The tokenizer's special tokens inside text (the same shapes make_token_corpus.mjs uses)."""
    out = []
    for s in specials:
        for t in [s, f"a{s}b", f" {s} ", f"{s}\n", f"\n{s}\nhello", f"{s}{s}", f"x {s[:-2]}", f"{s} world"]:
            out.append({"text": t})
    r = random.Random(seed)
    pool = [b["text"] for b in base[:600] if "bytes_hex" not in b]
    for _ in range(100):
        parts = [r.choice(pool) if r.random() < 0.6 else r.choice(specials) for _ in range(r.randint(2, 8))]
        out.append({"text": r.choice([" ", "", "\n"]).join(parts)})
    return out


def encode_record(tok, rec):
    text = rec["text"]
    ids = tok.encode(text, add_special_tokens=False).ids
    ids_special = tok.encode(text, add_special_tokens=True).ids
    out = {"text": text, "ids": ids, "ids_special": ids_special}
    decoded = tok.decode(ids, skip_special_tokens=False)
    if decoded != text:
        out["decoded"] = decoded
    skipped = tok.decode(ids_special, skip_special_tokens=True)
    if skipped != out.get("decoded", text):  # absent: the skip-special decode equals the plain one
        out["decoded_skip"] = skipped
    if "bytes_hex" in rec:
        out["bytes_hex"] = rec["bytes_hex"]
    return out


# ---------------------------------------------------------------- 1. trained tokenizers

def train_wordpiece(texts):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=3000, min_frequency=1, limit_alphabet=300,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def train_unigram(texts):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      max_piece_length=12, shrinking_factor=0.75, n_sub_iterations=2)
    tok.train_from_iterator(texts, trainer=trainer)
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                       special_tokens=[("<s>", s), ("</s>", e)])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    return tok


def make_trained(out_dir, base):
    train = [b["text"] for b in base[:900] if "bytes_hex" not in b]
    summary = {}
    for name, make, specials in [("hf_wordpiece", train_wordpiece, ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]),
                                 ("hf_unigram", train_unigram, ["<s>", "</s>", "<unk>"])]:
        tok = make(train)
        # Reload from JSON: what is tested is what the file says.
        tok = Tokenizer.from_str(tok.to_str())
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        tok.save(os.path.join(out_dir, name, "tokenizer.json"), pretty=False)
        records = [encode_record(tok, r) for r in base + special_records(specials, base, 7)]
        write_jsonl(os.path.join(out_dir, f"{name}_corpus.jsonl"), records)
        summary[name] = {"lines": len(records), "vocab": tok.get_vocab_size()}
        print(f"{name}: vocab {tok.get_vocab_size()}, {len(records)} lines", flush=True)
    return summary


# ---------------------------------------------------------------- 2. cross-check of the JS corpora

def load_tokenizer_file(tokdata, name):
    for fname in ("tokenizer.json", "tokenizer.json.gz"):
        path = os.path.join(tokdata, name, fname)
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                return Tokenizer.from_str(f.read())
    raise FileNotFoundError(f"{tokdata}/{name}/tokenizer.json[.gz]")


def crosscheck(out_dir, tokdata):
    summary = {}
    for name in ("qwen3", "llama3", "gemma3"):
        tok = load_tokenizer_file(tokdata, name)
        lines = read_jsonl(os.path.join(DATA, f"{name}_corpus.jsonl"))
        diffs, examples, fixed = Counter(), [], []
        for js in lines:
            hf = encode_record(tok, js)
            changed = [k for k in ("ids", "ids_special", "decoded", "decoded_skip") if js.get(k) != hf.get(k)]
            for k in changed:
                diffs[k] += 1
            if changed:
                hf["hf_fixed"] = changed
                if len(examples) < 20:
                    examples.append({"text": js["text"], "fields": changed,
                                     "js": {k: js.get(k) for k in changed}, "hf": {k: hf.get(k) for k in changed}})
            fixed.append(hf)
        write_jsonl(os.path.join(out_dir, f"{name}_corpus.jsonl"), fixed)
        summary[name] = {"lines": len(lines), "differences": dict(diffs), "examples": examples}
        print(f"crosscheck {name}: {len(lines)} lines, differences {dict(diffs)}", flush=True)
    return summary


# ---------------------------------------------------------------- 3. component cases

def tok_json(model, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None, added_tokens=()):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def bpe(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def added(i, content, special=False, lstrip=False, rstrip=False, single_word=False, normalized=None):
    return {"id": i, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": (not special) if normalized is None else normalized, "special": special}


TINY = bpe({"a": 0}, [])
BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]

NORM_INPUTS = [
    "Hello World", "  padded\t text \n", "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce\u00d5\u00dc",
    "e\u0301 A\u030a", "\ufb01 \ufb02 \u2460 \u00bc \uff76 \uff21\uff22\uff23", "\u03a3\u0391\u03a3 \u039f\u0394\u039f\u03a3 \u03c3",
    "\u0130stanbul \u0131", "Stra\u00dfe \u1e9e", "\u4e2d\u6587\u5b57\u7b26 and \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4",
    "ctrl\x00\x07\x1b\u200b\ufeff\ufffd end", "tabs\tand\r\nnewlines\u2028\u3000x", "\u01c5 \u01c8 \u01f1",
    "\u00c5 \u212b A\u030a", "\ud55c\uae00 \u1100\u1161\u11a8", "emoji \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "", " ", "\U0001d518\U0001d52b\U0001d526", "\u00a0nbsp\u00a0", "a\u0323\u0307 q\u0307\u0323",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0386\u0388\u0389", "\u0958 \u0915\u093c \u0916\u093c",
    "caf\u00e9 CAF\u00c9", "\u2126 \u212a \u00b5", "\uac00\u11a8 \u1100\u1161",
]

NORMALIZERS = [
    {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": "[aeiou]"}, "content": "<V>"},
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Strip", "strip_left": True, "strip_right": True},
    {"type": "Strip", "strip_left": True, "strip_right": False},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False, "strip_accents": True, "lowercase": False},
    {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"},
                                         {"type": "Strip", "strip_left": True, "strip_right": True}]},
]

PRE_INPUTS = [
    "Hello, world! How's it going?", "the-final--countdown", "  leading and trailing  ", "a  b\t\tc\n\nd",
    "numbers 123 4567 \u0663\u0664 \u00b2 \u00bd \u216b 1.5e-3", "snake_case camelCase ALLCAPS x2y3",
    "\u4e2d\u6587\uff0c\u6807\u70b9\u3002\u65e5\u672c\u8a9e\uff01", "emoji\U0001f44d\U0001f3fdhere \U0001f468\u200d\U0001f469\u200d\U0001f467 end",
    "\u24d0\u24d1 \u24b6 \U0001f130 circled", "e\u0301 combining and zero\u200dwidth\u200cjoiner",
    "don't stop: it's 9:30 (ok) [x] {y} <z> $5 ^_^ `q` |p| ~w~", "\u2581already\u2581metaspace",
    "", " ", "x", "tab\tend", "na\u00efve caf\u00e9", "line1\r\nline2", "--", "a-", "-a",
]

QWEN_PATTERN = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def pre_tokenizer_configs():
    out = []
    for b in BEHAVIORS:
        for inv in (False, True):
            out.append({"type": "Split", "pattern": {"String": "-"}, "behavior": b, "invert": inv})
        out.append({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": b, "invert": False})
        out.append({"type": "Punctuation", "behavior": b})
    out.append({"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "MergedWithNext", "invert": False})
    out.append({"type": "Split", "pattern": {"Regex": "x*"}, "behavior": "Isolated", "invert": False})
    out.append({"type": "Split", "pattern": {"Regex": "x*"}, "behavior": "Removed", "invert": False})
    out.append({"type": "Split", "pattern": {"Regex": "\\p{P}+"}, "behavior": "Isolated", "invert": True})
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            out.append({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split})
    out.append({"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True})
    out.append({"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": False})
    out += [{"type": "Digits", "individual_digits": True}, {"type": "Digits", "individual_digits": False},
            {"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "BertPreTokenizer"},
            {"type": "CharDelimiterSplit", "delimiter": "-"}]
    for aps in (True, False):
        for rx in (True, False):
            out.append({"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": True, "use_regex": rx})
    out.append({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                      {"type": "Digits", "individual_digits": True},
                                                      {"type": "Punctuation", "behavior": "Isolated"}]})
    out.append({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]})
    return out


LLAMA2_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}

DECODER_CASES = [
    ({"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
     [["\u0120hello", "\u0120world"], ["\u00c3\u00a9", "\u0120", "\u00f0\u0141\u0133", "\u012f"], ["\u00f0\u0141"],
      ["plain", "\u20acuro"], ["\u010a", "\u0120\u0120"]]),
    ({"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, [["\u2581a\u2581b", "c\u2581"]]),
    ({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": "_"}, [["a  b", "\t"]]),
    ({"type": "ByteFallback"}, [["<0x41>", "<0x42>"], ["<0xE4>", "<0xBD>", "<0xA0>", "x"], ["<0xE4>", "<0xBD>"],
                                ["<0xFF>", "<0x41>", "y"], ["<0xe4>", "<0x4>", "<0x41x"], ["a", "<0x20>", "b"]]),
    ({"type": "Fuse"}, [["a", "b", "c"], []]),
    ({"type": "Strip", "content": " ", "start": 1, "stop": 0}, [["  a ", "b  "]]),
    ({"type": "Strip", "content": "\u2581", "start": 2, "stop": 1}, [["\u2581\u2581\u2581x\u2581\u2581", "\u2581y\u2581"]]),
    ({"type": "WordPiece", "prefix": "##", "cleanup": True},
     [["hello", "##world", ",", "don", "'", "t", "do", "not", ".", "##s", "n't", "'m", "'s"], ["un", "##aff", "##able", "!"]]),
    ({"type": "WordPiece", "prefix": "##", "cleanup": False}, [["hello", "##world", ",", "do", "not", "."]]),
    (LLAMA2_DECODER, [["\u2581Hello", "\u2581world", "<0xE4>", "<0xBD>", "<0xA0>"], ["<0x20>", "\u2581x"]]),
]
for _scheme in ("always", "first", "never"):
    DECODER_CASES.append(({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": _scheme, "split": True},
                          [["\u2581Hey", "\u2581friend", "!"], ["\u2581\u2581x", "\u2581"], ["no", "\u2581space"], ["\u2581"]]))


def tokenizer_cases():
    """(name, tokenizer json, inputs) for small whole tokenizers."""
    cases = []
    v = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6, "<0xC3>": 7, "<0xA9>": 8}
    m = [["a", "b"], ["b", "c"], ["ab", "c"]]
    unk_inputs = ["abc", "azzb", "zzz", "a\u00e9z", "\u00e9\u00e9z", "z\u00e9z", "cab", "<unk>", "bca"]
    for name, kw in [("bpe_no_unk", {}), ("bpe_unk", {"unk_token": "<unk>"}),
                     ("bpe_fuse_unk", {"unk_token": "<unk>", "fuse_unk": True}),
                     ("bpe_byte_fallback", {"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True}),
                     ("bpe_byte_fallback_no_unk", {"byte_fallback": True}),
                     ("bpe_unk_missing", {"unk_token": "<missing>"})]:
        cases.append((name, tok_json(bpe(v, m, **kw)), unk_inputs))
    vp = {"a": 0, "##b": 1, "##c": 2, "ab": 3, "abc": 4, "b": 5, "c": 6}
    cases.append(("bpe_prefix", tok_json(bpe(vp, [["a", "##b"], ["ab", "##c"]], continuing_subword_prefix="##",
                                             unk_token="c")), ["abc", "ab", "cab", "ba", "bb"]))
    vs = {"a": 0, "b": 1, "c</w>": 2, "ab": 3, "abc</w>": 4, "b</w>": 5}
    cases.append(("bpe_suffix", tok_json(bpe(vs, [["a", "b"], ["ab", "c</w>"]], end_of_word_suffix="</w>")),
                  ["abc", "ab", "cab", "ba"]))
    vi = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}
    cases.append(("bpe_ignore_merges", tok_json(bpe(vi, [["a", "b"]], ignore_merges=True)), ["abc", "abcabc", "ab", "cab"]))
    vw = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "a": 4, "##b": 5, "##c": 6, "abc": 7, "##bc": 8, "[CLS]": 9, "[SEP]": 10}
    wp = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 5,
          "vocab": vw}
    cases.append(("wordpiece", tok_json(wp, pre_tokenizer={"type": "WhitespaceSplit"},
                                        post_processor={"type": "BertProcessing", "sep": ["[SEP]", 10], "cls": ["[CLS]", 9]},
                                        decoder={"type": "WordPiece", "prefix": "##", "cleanup": True},
                                        added_tokens=[added(0, "[UNK]", True), added(9, "[CLS]", True), added(10, "[SEP]", True)]),
                  ["unaffable", "abc", "abcd", "unaff abc", "ab c", "abcabc", "\u00fc", "[CLS] abc [SEP]"]))
    wp2 = dict(wp, unk_token="[NOPE]")
    cases.append(("wordpiece_unk_missing", tok_json(wp2, pre_tokenizer={"type": "WhitespaceSplit"}), ["abc", "zzz"]))
    uv = [["<unk>", 0.0], ["a", -1.0], ["b", -2.0], ["ab", -1.5], ["c", -3.0], ["abc", -4.0], ["\u2581", -1.0],
          ["\u2581a", -1.2], ["<s>", 0.0], ["</s>", 0.0]]
    ms = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
    tp = {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
          "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                   {"SpecialToken": {"id": "</s>", "type_id": 1}}],
          "special_tokens": {"<s>": {"id": "<s>", "ids": [8], "tokens": ["<s>"]},
                             "</s>": {"id": "</s>", "ids": [9], "tokens": ["</s>"]}}}
    uni_inputs = ["abc", "abzzc", "zz", "a b", "<unk>", "\u00e9", "ab<unk>z", " a", "<s>a b</s>", "a<s> b"]
    cases.append(("unigram", tok_json({"type": "Unigram", "unk_id": 0, "vocab": uv, "byte_fallback": False},
                                      pre_tokenizer=ms, post_processor=tp, decoder=ms,
                                      added_tokens=[added(0, "<unk>", True), added(8, "<s>", True), added(9, "</s>", True)]),
                  uni_inputs))
    ub = uv + [["<0x7A>", -5.0], ["<0xC3>", -5.0], ["<0xA9>", -5.0]]
    cases.append(("unigram_byte_fallback",
                  tok_json({"type": "Unigram", "unk_id": 0, "vocab": ub, "byte_fallback": True}, pre_tokenizer=ms,
                           decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}, ms]}),
                  ["abz", "\u00e9", "\u1e91", "zz\u00e9", "a z\u00e9b"]))
    cases.append(("unigram_no_unk", tok_json({"type": "Unigram", "unk_id": None, "vocab": uv[1:], "byte_fallback": False}),
                  ["abc", "abz"]))
    # Mistral-like: Metaspace "first" without split, byte fallback BPE, <s> added token.
    vm = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "H": 4, "e": 5, "l": 6, "o": 7, "w": 8, "r": 9, "d": 10,
          "\u2581H": 11, "ll": 12, "<0x21>": 13, "\u2581w": 14, "<0xE4>": 15, "<0xBD>": 16, "<0xA0>": 17}
    mm = [["\u2581", "H"], ["l", "l"], ["\u2581", "w"]]
    mistral = tok_json(bpe(vm, mm, unk_token="<unk>", fuse_unk=True, byte_fallback=True),
                       pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
                       post_processor={"type": "TemplateProcessing",
                                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                       "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                                {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
                       decoder={"type": "Sequence", "decoders": [
                           {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                           {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
                       added_tokens=[added(0, "<unk>", True), added(1, "<s>", True), added(2, "</s>", True)])
    mistral_inputs = ["Hello world", "<s>Hello", " Hello", "Hello<s>world", "world!", "", "  ", "Hello \u4f60!",
                      "</s> Hello </s>"]
    cases.append(("mistral_like", mistral, mistral_inputs))
    llama2 = dict(mistral, pre_tokenizer=None,
                  normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                                  {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})
    cases.append(("llama2_like", llama2, mistral_inputs))
    # Byte-level BPE with a non-ASCII added token (does decode pass added tokens through the decoder?).
    vb = {"a": 0, "b": 1, "\u00c3": 2, "\u00a9": 3, "\u0120": 4}
    cases.append(("byte_level_added_token",
                  tok_json(bpe(vb, []), pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
                           decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                           post_processor={"type": "RobertaProcessing", "sep": ["b", 1], "cls": ["a", 0],
                                           "trim_offsets": True, "add_prefix_space": True},
                           added_tokens=[added(5, "\u00e9", False), added(6, "<s>", True)]),
                  ["a\u00e9b", "ab", "a b", "\u00e9", "<s>a\u00e9<s>"]))
    # Added-token flags with a lowercasing normalizer.
    va = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
    va["<unk>"] = 26
    flags = [added(30, "<L>", lstrip=True), added(31, "<R>", rstrip=True), added(32, "<sw>", single_word=True),
             added(33, "<N>", normalized=True), added(34, "<s>", special=True), added(35, "<s><s>")]
    cases.append(("added_token_flags",
                  tok_json(bpe(va, [], unk_token="<unk>"), normalizer={"type": "Lowercase"},
                           pre_tokenizer={"type": "WhitespaceSplit"}, added_tokens=flags),
                  ["a <L>b", "a \t <L> b", "a<R>  b", "a <R> b", "a <sw> b", "a<sw>b", "<sw>", "x<N>y", "x<n>y",
                   "<s>a<s>", "<s><s><s>", "A<S>B"]))
    return cases


def component_cases():
    out, errors = [], 0

    def safe(rec, fn):
        nonlocal errors
        try:
            fn(rec)
            out.append(rec)
        except Exception as e:  # HF refused the config or the input: record it, the C++ side skips it
            errors += 1
            rec["error"] = f"{type(e).__name__}: {e}"
            out.append(rec)

    def load(kind, cfg, **parts):
        nonlocal errors
        try:
            return Tokenizer.from_str(json.dumps(tok_json(TINY, **parts)))
        except Exception as e:
            out.append({"kind": kind, "config": cfg, "error": f"{type(e).__name__}: {e}"})
            errors += 1
            return None

    for cfg in NORMALIZERS:
        tok = load("normalizer", cfg, normalizer=cfg)
        for s in NORM_INPUTS if tok else []:
            safe({"kind": "normalizer", "config": cfg, "input": s},
                 lambda r: r.update(output=tok.normalizer.normalize_str(r["input"])))
    for cfg in pre_tokenizer_configs():
        tok = load("pre_tokenizer", cfg, pre_tokenizer=cfg)
        for s in PRE_INPUTS if tok else []:
            safe({"kind": "pre_tokenizer", "config": cfg, "input": s},
                 lambda r: r.update(output=[p for p, _ in tok.pre_tokenizer.pre_tokenize_str(r["input"])]))
    for cfg, lists in DECODER_CASES:
        tok = load("decoder", cfg, decoder=cfg)
        for tokens in lists if tok else []:
            safe({"kind": "decoder", "config": cfg, "input": tokens},
                 lambda r: r.update(output=tok.decoder.decode(r["input"])))
    for name, cfg, inputs in tokenizer_cases():
        try:
            tok = Tokenizer.from_str(json.dumps(cfg))
        except Exception as e:
            out.append({"kind": "tokenizer", "name": name, "config": cfg, "error": f"{type(e).__name__}: {e}"})
            errors += 1
            continue
        for s in inputs:
            rec = {"kind": "tokenizer", "name": name, "config": cfg, "input": s}
            try:
                rec.update(encode_record(tok, {"text": s}))
            except Exception as e:
                rec["encode_error"] = f"{type(e).__name__}: {e}"
            out.append(rec)
    return out, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory for the generated files")
    ap.add_argument("--tokdata", help="directory with qwen3/llama3/gemma3 tokenizer.json[.gz] to cross-check")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import tokenizers
    summary = {"tokenizers_version": tokenizers.__version__}
    base = read_jsonl(os.path.join(DATA, "corpus_texts.jsonl"))
    for step, fn in [("trained", lambda: make_trained(args.out, base)),
                     ("crosscheck", lambda: crosscheck(args.out, args.tokdata) if args.tokdata else None)]:
        try:
            summary[step] = fn()
        except Exception:
            traceback.print_exc()
            summary[step] = {"failed": traceback.format_exc()}
    try:
        cases, errors = component_cases()
        write_jsonl(os.path.join(args.out, "hf_component_cases.jsonl"), cases)
        summary["components"] = {"cases": len(cases), "hf_errors": errors}
        print(f"component cases: {len(cases)} ({errors} where HF raised)", flush=True)
    except Exception:
        traceback.print_exc()
        summary["components"] = {"failed": traceback.format_exc()}
    with open(os.path.join(args.out, "crosscheck.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, ensure_ascii=False, indent=1)
    brief = dict(summary)
    if isinstance(brief.get("crosscheck"), dict):
        brief["crosscheck"] = {n: (x.get("differences") if isinstance(x, dict) else x)
                               for n, x in brief["crosscheck"].items()}
    print(json.dumps(brief, ensure_ascii=False)[:6000])

if __name__ == "__main__":
    sys.exit(main())
