// Builds the tokenizer exactness corpora: >= 2,000 strings per tokenizer (prose, code, digits, scripts
// incl. CJK/Arabic/Hindi/Thai, emoji with ZWJ and skin tones, combining marks, whitespace and newline runs,
// special tokens inside text, random Unicode, random bytes) encoded by @lenml/tokenizers (a JS port of the
// Hugging Face tokenizers pipeline) from the same tokenizer.json / tokenizer_config.json files the C++
// tests load (Qwen3, Llama 3, Gemma 3). Not a test by itself: it only records what the reference produces;
// scripts/text/make_hf_tokenizers.py cross-checks these files against HF `tokenizers` (the truth where
// they disagree) and makes the WordPiece/Unigram corpora from corpus_texts.jsonl written here.
// Output (tests/unit/text/data/): corpus_texts.jsonl (the shared strings: {"text"[, "bytes_hex"]}) and
// {qwen3,llama3,gemma3}_corpus.jsonl, one {"text", "ids", "ids_special"[, "decoded"][, "decoded_skip"]
// [, "bytes_hex"]} per line ("decoded" only where decode(ids) differs from text; "decoded_skip":
// decode(ids_special, skip_special_tokens) where it differs from decode(ids); "bytes_hex": the raw input
// was these bytes, invalid UTF-8, and "text" is its WHATWG/U+FFFD-per-maximal-subpart decoding, the
// documented input policy). Deterministic (seeded). Run from the repository root after `npm ci`:
//   node scripts/text/make_token_corpus.mjs
// Stress mode (not committed; for hunting mismatches): --stress N --out DIR writes N random lines per kind.
import { TokenizerLoader } from "@lenml/tokenizers";
import fs from "node:fs";
import path from "node:path";

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const argv = process.argv.slice(2);
const arg = (name, def) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : def);
const OUT_DIR = arg("--out", path.join(ROOT, "tests/unit/text/data"));
const STRESS = Number(arg("--stress", "0"));

// mulberry32: small seeded PRNG so the corpus is reproducible.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PROSE = [
  "The quick brown fox jumps over the lazy dog.",
  "Hello, world! How are you doing today?",
  "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
  "I'm sure they'll say it's fine, but we'd better check: they've been wrong before.",
  "SHE'S HERE. WE'LL GO. THEY'RE LATE. I'VE SEEN IT. YOU'D KNOW. I'M OUT. DON'T!",
  "She said \"no\" -- and then (after a pause) 'maybe'.",
  "e.g. i.e. etc. Mr. Smith vs. Dr. Jones; U.S.A. and U.K.",
  "Email me at someone@example.com or visit https://example.org/path?q=1&r=two#frag",
  "Prices: $19.99, €5,00, £3.50, ¥1000 — a 25% discount!",
  "Hyphenated-words, under_scores, camelCaseWords and PascalCase and snake_case_names.",
  "   leading spaces and trailing spaces   ",
  "tabs\tbetween\twords\t\tand double tabs",
  "line one\nline two\n\nline four after a blank line\n",
  "windows\r\nline\r\nendings\r\n",
  "multiple     internal      spaces",
  "a",
  " ",
  "",
  "\n",
  "\n\n\n",
  "  \n  \n",
  "!!!???...,,,;;;:::",
  "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'M 'LL 'D",
  "don't won't can't shouldn't it's he'll we're they've I'd",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
];

const CODE = [
  "int main(int argc, char** argv) {\n  std::vector<int> v = {1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
  "{\"name\": \"bunsen\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"cuda\"], \"nested\": {\"a\": null, \"b\": true}}",
  "for (let i = 0; i < 10; i++) { console.log(`i = ${i}`); }",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
  "#include <cstdio>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
  "    \tmixed indentation\n\t    more\n",
  "x+=1;y-=2;z*=3;w/=4;a%=5;b<<=6;c>>=7;d&=8;e|=9;f^=10;",
  "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
  "fn main() -> Result<(), Box<dyn Error>> { let x: u32 = 0xFF_u32; Ok(()) }",
  "$ ls -la | grep '^d' | awk '{print $9}' > dirs.txt 2>&1",
  "// comment\n/* block\n   comment */\n# hash comment\n-- sql comment\n",
];

const DIGITS = [
  "0", "12", "123", "1234", "12345", "1234567890", "3.14159265358979", "1,000,000", "1e-10", "-42",
  "2024-06-01T12:34:56Z", "+1 (555) 123-4567", "IPv4 192.168.0.1 and port 8080", "v1.2.3-rc.4",
  "٠١٢٣٤٥٦٧٨٩", "१२३४५", "１２３４５", "Ⅻ Ⅳ ⅷ", "½ ¼ ¾ ² ³",
];

const SCRIPTS = [
  "你好，世界！今天天气很好。", "我爱北京天安门。机器学习和自然语言处理。",
  "日本語のテキストです。ひらがなとカタカナと漢字。", "東京は日本の首都です。",
  "안녕하세요, 세계! 한국어 문장입니다.", "Привет, мир! Как дела?", "Γειά σου Κόσμε! αβγδεζηθ",
  "مرحبا بالعالم! هذه جملة عربية.", "שלום עולם! זה משפט בעברית.",
  "नमस्ते दुनिया! यह हिंदी वाक्य है।", "क्षत्रिय द्वितीय श्रृंखला",
  "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ", "Xin chào thế giới! Tiếng Việt có dấu.",
  "Ελληνικά και English mixed 中文 mixed", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ሰላም ለዓለም", "Բարեւ աշխարհ", "გამარჯობა მსოფლიო",
];

const EMOJI = [
  "😀😃😄😁", "👍🏽 thumbs up with skin tone", "👨‍👩‍👧‍👦 family ZWJ", "🏳️‍🌈 flag", "🇺🇸🇯🇵🇩🇪 flags",
  "1️⃣ 2️⃣ #️⃣ keycaps", "❤️ ❤ ♥️", "🧑🏿‍🚀 astronaut", "👩‍💻👨‍🔬", "🙂🙃🤔 text🙂inline",
  "☕️🍕🍣", "🤷‍♀️🤷‍♂️",
];

const COMBINING = [
  "e\u0301", "cafe\u0301", "n\u0303o", "a\u0300\u0301\u0302", "\u0041\u030A", "Å vs \u212B vs A\u030A",
  "\u1100\u1161\u11A8", "\u1112\u1161\u11AB\u1100\u1173\u11AF", "ﬁ ﬂ ﬀ ligatures", "\u0958 \u0915\u093C",
  "ǅ ǈ ǋ", "q\u0307\u0323", "\u00E9 precomposed",
];

const SPACES = [
  "\u00A0non-breaking\u00A0space", "ideographic\u3000space", "thin\u2009space en\u2002space em\u2003space",
  "line\u2028separator", "para\u2029separator", "narrow\u202Fnbsp", "math\u205Fspace", "ogham\u1680space",
  "zero\u200Bwidth", "mongolian\u180Evowel", "word \t\n\r\u000B\u000C mixed", "tab\t", "\t\t\tleading tabs",
  "trailing newline\n", "spaces then newline   \n   next", "\r", "\r\r\n\n", "  x  ", "x\n \ny",
];

// Blocks whose assignments and general categories are identical in every Unicode version the engine
// and the references use (PCRE2 10.42 = Unicode 14 .. Node 20 = Unicode 17). U+0085 and U+FEFF are left
// out: JS's \s differs from Oniguruma's there (see tests/unit/text/test_pre_tokenizer.cpp).
const RANDOM_RANGES = [
  [0x20, 0x7e, 8], [0xa0, 0xff, 2], [0x100, 0x24f, 2], [0x300, 0x36f, 1], [0x391, 0x3c9, 1],
  [0x400, 0x4ff, 2], [0x5d0, 0x5ea, 1], [0x621, 0x64a, 1], [0x900, 0x97f, 1], [0xe01, 0xe3a, 1],
  [0x1e00, 0x1eff, 1], [0x2000, 0x206f, 1], [0x2190, 0x21ff, 1], [0x2200, 0x22ff, 1], [0x2500, 0x257f, 1],
  [0x3000, 0x303f, 1], [0x3041, 0x3096, 1], [0x30a0, 0x30ff, 1], [0x4e00, 0x9fa5, 3], [0xac00, 0xd7a3, 2],
  [0xe000, 0xe0ff, 1], [0xff01, 0xff5e, 1], [0x1f300, 0x1f5ff, 2], [0x1f600, 0x1f64f, 2], [0x9, 0xd, 2],
];
const EXCLUDED = new Set([0x85, 0xfeff, 0x2065]);

function random_unicode(r, len) {
  const total = RANDOM_RANGES.reduce((s, x) => s + x[2], 0);
  let out = "";
  for (let i = 0; i < len; ++i) {
    let pick = r() * total;
    let range = RANDOM_RANGES[0];
    for (const x of RANDOM_RANGES) {
      if ((pick -= x[2]) < 0) { range = x; break; }
    }
    const cp = range[0] + Math.floor(r() * (range[1] - range[0] + 1));
    if (EXCLUDED.has(cp)) { --i; continue; }
    out += String.fromCodePoint(cp);
  }
  return out;
}

function random_ascii(r, len) {
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789     \n\t'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`";
  let out = "";
  for (let i = 0; i < len; ++i) out += alphabet[Math.floor(r() * alphabet.length)];
  return out;
}

function mix(r, pools, n) {
  let out = "";
  for (let i = 0; i < n; ++i) {
    const pool = pools[Math.floor(r() * pools.length)];
    out += pool[Math.floor(r() * pool.length)];
    out += [" ", "", "\n", "  ", "\t"][Math.floor(r() * 5)];
  }
  return out;
}

// Strings that exercise SentencePiece-style tokenizers (literal U+2581, byte fallback, long runs).
const EXTRA = [
  "\u2581\u2581x", "a\u2581b \u2581", "\uFFFD replacement char \uFFFD", "<0x41> looks like a byte token",
  "\u{10FFFF}\u{E0001}", "\u{1D11E} musical \u{1D11E}", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ǉ ǌ Ǳ", "İstanbul ıi ß ẞ ς Σ",
  "\u200D\u200C\u2060\uFEFF zero widths", "\u00AD soft hyphen", "ﷺ ﷽", "ᄀᄁᄂ", "ｶﾀｶﾅ ﾊﾝｶｸ",
];

function whitespace_run(r) {
  const units = [" ", "\n", "\t", "\r\n", "\u3000", "  \n", "\n\n", " \t"];
  const unit = units[Math.floor(r() * units.length)];
  const run = unit.repeat(1 + Math.floor(r() * 120));
  const word = ["", "x", "hello", "你好", "\u0915\u093F"][Math.floor(r() * 5)];
  return r() < 0.5 ? word + run + word : run;
}

function digit_run(r) {
  let out = "";
  const n = 1 + Math.floor(r() * 40);
  for (let i = 0; i < n; ++i) out += r() < 0.9 ? String(Math.floor(r() * 10)) : [".", ",", " ", "-", "e"][Math.floor(r() * 5)];
  return out;
}

// Random bytes, mostly invalid UTF-8: raw bytes, truncated multi-byte characters, stray continuations.
function random_bytes(r, len) {
  const out = [];
  while (out.length < len) {
    const k = r();
    if (k < 0.3) {
      out.push(Math.floor(r() * 256));
    } else if (k < 0.6) {
      const enc = [...Buffer.from(random_unicode(r, 1), "utf8")];
      out.push(...enc.slice(0, r() < 0.5 ? enc.length : 1 + Math.floor(r() * enc.length)));
    } else if (k < 0.8) {
      out.push(0x80 + Math.floor(r() * 64));
    } else {
      out.push(0x20 + Math.floor(r() * 95));
    }
  }
  return Uint8Array.from(out.slice(0, len));
}

const UTF8 = new TextDecoder("utf-8", { ignoreBOM: true });  // U+FFFD per maximal subpart (WHATWG)

// The shared strings (records {text[, bytes_hex]}) every tokenizer's corpus starts with.
function base_records(seed) {
  const r = rng(STRESS > 0 ? seed * 7919 + STRESS : seed);
  const pools = [PROSE, CODE, DIGITS, SCRIPTS, EMOJI, COMBINING, SPACES, EXTRA];
  const out = [];
  const add = (n, make) => { for (let i = 0; i < n; ++i) out.push(make()); };
  const scale = STRESS > 0 ? STRESS / 100 : 1;
  if (STRESS === 0) for (const p of pools) for (const text of p) out.push({ text });
  add(700 * scale, () => ({ text: mix(r, pools, 1 + Math.floor(r() * 6)) }));
  add(300 * scale, () => ({ text: random_ascii(r, 1 + Math.floor(r() * 120)) }));
  add(400 * scale, () => ({ text: random_unicode(r, 1 + Math.floor(r() * 80)) }));
  add(150 * scale, () => ({ text: whitespace_run(r) }));
  add(100 * scale, () => ({ text: digit_run(r) }));
  add(200 * scale, () => {
    const bytes = random_bytes(r, 1 + Math.floor(r() * 60));
    return { text: UTF8.decode(bytes), bytes_hex: Buffer.from(bytes).toString("hex") };
  });
  add(20 * scale, () => ({ text: mix(r, pools, 30 + Math.floor(r() * 50)) }));  // long documents
  if (STRESS === 0) {
    out.push({ text: " ".repeat(5000) + "x" }, { text: "\n".repeat(3000) }, { text: "a".repeat(3000) });
    out.push({ text: "\t \n".repeat(700) + "end" }, { text: "9".repeat(2000) });
  }
  for (const rec of out) if (rec.bytes_hex && Buffer.from(rec.text, "utf8").toString("hex") === rec.bytes_hex) delete rec.bytes_hex;
  return out;
}

// Tokenizer-specific lines: its special/added tokens inside text.
function special_records(specials, seed) {
  const r = rng(seed + 1000);
  const out = [];
  for (const s of specials) {
    for (const t of [s, `a${s}b`, ` ${s} `, `${s}\n`, `\n${s}\nhello`, `${s}${s}`, `x ${s.slice(0, -2)}`, `${s} world`])
      out.push({ text: t });
  }
  const pools = [PROSE, CODE, SCRIPTS, EMOJI, SPACES, specials];
  for (let i = 0; i < 100; ++i) out.push({ text: mix(r, pools, 2 + Math.floor(r() * 8)) });
  return out;
}

function load(name) {
  const dir = path.join(ROOT, "node_modules/@lenml", `tokenizer-${name}`, "models");
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
}

const TOKENIZERS = {
  qwen3: { seed: 3, specials: ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|vision_pad|>"] },
  llama3: { seed: 8, specials: ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>"] },
  gemma3: { seed: 13, specials: ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<start_of_image>", "<mask>", "<unused17>", "<table>", "</td>", "\t\t\t"] },
};

fs.mkdirSync(OUT_DIR, { recursive: true });
const base = base_records(1);
fs.writeFileSync(path.join(OUT_DIR, "corpus_texts.jsonl"), base.map((x) => JSON.stringify(x)).join("\n") + "\n");
console.log(`${path.join(OUT_DIR, "corpus_texts.jsonl")}: ${base.length} lines`);
for (const [name, cfg] of Object.entries(TOKENIZERS)) {
  const tok = load(name);
  const lines = [];
  for (const src of [...base, ...special_records(cfg.specials, cfg.seed)]) {
    const text = src.text;
    const ids = tok.encode(text, { add_special_tokens: false });
    const ids_special = tok.encode(text, { add_special_tokens: true });
    const rec = { text, ids, ids_special };
    const decode = (list, skip) =>  // the JS port refuses empty lists; HF decodes them to ""
      list.length ? tok.decode(list, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }) : "";
    const decoded = decode(ids, false);
    if (decoded !== text) rec.decoded = decoded;
    const skipped = decode(ids_special, true);
    if (skipped !== decoded) rec.decoded_skip = skipped;
    if (src.bytes_hex) rec.bytes_hex = src.bytes_hex;
    lines.push(JSON.stringify(rec));
  }
  const file = path.join(OUT_DIR, `${name}_corpus.jsonl`);
  fs.writeFileSync(file, lines.join("\n") + "\n");
  console.log(`${file}: ${lines.length} lines`);
}
