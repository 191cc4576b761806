// Servable tiny models for the server tests, built at test time from the golden fixtures
// (tests/golden/data/<name>/): config.json as committed plus model.safetensors regenerated with the shared
// synthetic generator (src/model/synthetic.h, scripts/golden/synth.py), i.e. the exact bf16 weights Hugging
// Face transformers ran on. No tokenizer files: `bunsen serve` then uses its byte tokenizer (ids 0..255 =
// bytes, every fixture's vocab_size is > 256). Not a model library: nothing here knows a family's layout.
// Invariants: every regenerated tensor hashes (FNV-1a 64 over its bf16 bytes) to the fixture's recorded
// value, or buildTinyModel throws; the output directory only ever appears complete (temp dir + rename).
// Also what the family tests share: the family list, prompt ids, and the answer comparison.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from './harness.mjs';

export const fixturesDir = path.join(repoRoot, 'tests', 'golden', 'data');

// 64-bit unsigned values as [hi, lo] uint32 pairs (BigInt is ~20x slower on the ~1M elements per model).
function mul64(ah, al, bh, bl) {
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const mid = a0 * b1 + a1 * b0;  // < 2^33, exact
  const lo = a0 * b0 + (mid % 65536) * 65536;  // < 2^33
  let hi = a1 * b1 + Math.floor(mid / 65536) + Math.floor(lo / 4294967296);
  hi = (hi + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
  return [hi, lo >>> 0];
}

function add64(ah, al, bh, bl) {
  const lo = al + bl;
  return [(ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0, lo >>> 0];
}

// x ^ (x >> s) for 0 < s < 32.
function xorShift(h, l, s) {
  return [(h ^ (h >>> s)) >>> 0, (l ^ ((l >>> s) | (h << (32 - s)))) >>> 0];
}

function splitmix64(h, l) {
  let [zh, zl] = add64(h, l, 0x9e3779b9, 0x7f4a7c15);
  [zh, zl] = xorShift(zh, zl, 30);
  [zh, zl] = mul64(zh, zl, 0xbf58476d, 0x1ce4e5b9);
  [zh, zl] = xorShift(zh, zl, 27);
  [zh, zl] = mul64(zh, zl, 0x94d049bb, 0x133111eb);
  return xorShift(zh, zl, 31);
}

function fnv1a64(bytes, start = [0xcbf29ce4, 0x84222325]) {
  let [h, l] = start;
  for (let i = 0; i < bytes.length; ++i) {
    l = (l ^ bytes[i]) >>> 0;
    [h, l] = mul64(h, l, 0x00000100, 0x000001b3);
  }
  return [h, l];
}

const hex64 = ([h, l]) => h.toString(16).padStart(8, '0') + l.toString(16).padStart(8, '0');

// synthetic_scale() of src/model/synthetic.cpp, rule for rule.
function syntheticScale(name, shape) {
  const invSqrt = (n, num) => Math.fround(num / Math.sqrt(n));
  if (name.includes('norm') && name.endsWith('.weight')) return [0.25, 1.0];
  if (name.includes('layer_scalar')) return [0.25, 1.0];
  if (name.endsWith('.router.scale')) return [0.25, 1.0];
  if (name.endsWith('.bias')) return [0.25, 0.0];
  if (name.includes('embed_tokens')) return [1.0, 0.0];
  if (shape.length === 0) return [1.0, 0.0];
  const inDim = shape[shape.length - 1];
  if (name === 'lm_head.weight') return [invSqrt(inDim, 4.0), 0.0];
  if (name.endsWith('.router.proj.weight')) return [invSqrt(inDim, 8.0), 0.0];
  return [invSqrt(inDim, 1.0), 0.0];
}

const f32 = new Float32Array(1);
const f32bits = new Uint32Array(f32.buffer);

// The tensor's bf16 values (synthetic_tensor(name, shape, kBF16, seed)) as a Uint16Array.
export function syntheticBf16(name, shape, seed) {
  const n = shape.reduce((a, b) => a * b, 1);
  const [scale, offset] = syntheticScale(name, shape);
  const nameHash = fnv1a64(Buffer.from(name, 'utf8'));
  const key = [(nameHash[0] ^ Number(seed >> 32n)) >>> 0, (nameHash[1] ^ Number(seed & 0xffffffffn)) >>> 0];
  const out = new Uint16Array(n);
  for (let i = 0; i < n; ++i) {
    const [kh, kl] = add64(key[0], key[1], Math.floor(i / 4294967296), i >>> 0);
    const [hh] = splitmix64(kh, kl);
    const x = ((hh >>> 8) - 8388608) / 8388608;  // exact f32: a 24-bit integer times 2^-23
    const prod = Math.fround(x * scale);
    f32[0] = Math.fround(prod + offset);
    const bits = f32bits[0];
    const bf = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
    // |v| < 2^-14 -> +0: the bf16 exponent field below 127 - 14 = 113.
    out[i] = ((bf >>> 7) & 0xff) < 113 ? 0 : bf;
  }
  return out;
}

// The fixture's {weights: {name: {shape, fnv1a64}}, seed} from golden.safetensors' header metadata.
export function fixtureWeights(fixture) {
  const file = path.join(fixturesDir, fixture, 'golden.safetensors');
  const fd = fs.openSync(file, 'r');
  try {
    const len = Buffer.alloc(8);
    fs.readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const head = Buffer.alloc(n);
    fs.readSync(fd, head, 0, n, 8);
    const meta = JSON.parse(head.toString('utf8')).__metadata__ || {};
    if (!meta.weights || !meta.seed) throw new Error(`${file}: metadata lacks weights/seed`);
    return { weights: JSON.parse(meta.weights), seed: BigInt(meta.seed) };
  } finally {
    fs.closeSync(fd);
  }
}

function writeSafetensors(file, tensors) {
  const header = { __metadata__: { format: 'pt' } };
  let offset = 0;
  for (const { name, shape, data } of tensors) {
    header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, len);
    fs.writeSync(fd, Buffer.from(json, 'utf8'));
    for (const { data } of tensors) fs.writeSync(fd, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  } finally {
    fs.closeSync(fd);
  }
}

// Writes <root>/<fixture>/{config.json, model.safetensors} (once; later calls return the same directory)
// and returns the directory. Throws when a regenerated tensor's hash differs from the fixture's.
export function buildTinyModel(fixture, root) {
  const dir = path.join(root, fixture);
  if (fs.existsSync(path.join(dir, 'model.safetensors'))) return dir;
  const { weights, seed } = fixtureWeights(fixture);
  const tensors = [];
  for (const name of Object.keys(weights).sort()) {
    const { shape, fnv1a64: want } = weights[name];
    const data = syntheticBf16(name, shape, seed);
    const got = hex64(fnv1a64(new Uint8Array(data.buffer)));
    if (got !== want) throw new Error(`${fixture}: regenerated ${name} hashes to ${got}, the fixture says ${want}`);
    tensors.push({ name, shape, data });
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { recursive: true });
  fs.copyFileSync(path.join(fixturesDir, fixture, 'config.json'), path.join(tmp, 'config.json'));
  writeSafetensors(path.join(tmp, 'model.safetensors'), tensors);
  fs.renameSync(tmp, dir);
  return dir;
}

// One fixture per family issue 9 names, and whether it has linear-attention (gated DeltaNet) layers.
export const kFamilies = [
  { fixture: 'llama3', hybrid: false },        // control: llama-like
  { fixture: 'gemma2', hybrid: false },        // sliding + global, soft-caps
  { fixture: 'gemma3_text', hybrid: false },
  { fixture: 'gemma4_text', hybrid: false },   // sliding + global, per-layer inputs, KV-shared layers
  { fixture: 'gemma4_moe', hybrid: false },    // Gemma 4 MoE
  { fixture: 'qwen3_moe', hybrid: false },
  { fixture: 'qwen3_5_text', hybrid: true },   // hybrid
  { fixture: 'qwen3_next', hybrid: true },     // hybrid + MoE
];

// n deterministic token ids in [3, 1000) (every fixture's vocab is larger; 0..2 are pad/bos/eos).
export function tokenIds(n, seed) {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 3 + (s % 997);
  });
}

// Hybrids' logprobs with and without the prefix cache agree to f32 rounding only (~5e-6): with the cache
// on, a prompt of >= 64 tokens is prefilled in pieces split at the state-snapshot block boundary, so
// gated_delta_rule takes its recurrent form where the uncached run takes the chunked one
// (kernels/ops.h kDeltaRuleChunkMinTokens). Tokens and text must still be equal.
export const kHybridLogprobTol = 1e-4;

// What must agree between two runs of one greedy /v1/completions request (legacy logprobs: 1).
export function completionAnswer(r) {
  assert.equal(r.status, 200, r.text);
  const c = r.json.choices[0];
  return {
    text: c.text, finish: c.finish_reason, tokens: c.logprobs.tokens, logprobs: c.logprobs.token_logprobs,
    prompt_tokens: r.json.usage.prompt_tokens, completion_tokens: r.json.usage.completion_tokens,
  };
}

// Bit-for-bit equal answers; with `looseLogprobs` (a hybrid with vs without the cache) the logprobs only
// within kHybridLogprobTol.
export function assertSameAnswer(got, want, looseLogprobs, what) {
  if (!looseLogprobs) return assert.deepEqual(got, want, what);
  assert.deepEqual({ ...got, logprobs: null }, { ...want, logprobs: null }, what);
  assert.equal(got.logprobs.length, want.logprobs.length, what);
  const worst = Math.max(0, ...got.logprobs.map((v, i) => Math.abs(v - want.logprobs[i])));
  assert.ok(worst <= kHybridLogprobTol, `${what}: logprobs differ by ${worst}`);
}
