// Every model family through the real `bunsen serve` on CPU (issue 9): a tiny model per family, built at
// test time from its golden fixture (tiny_models.mjs: HF's exact weights, byte tokenizer), served twice:
// `--batch 8` with the prefix cache (the default) and `--batch 1 --prompt-cache 0`. Eight concurrent greedy
// completions (token-id prompts of different lengths, four sharing a long prefix) must give the same
// tokens and logprobs on both; a conversation re-sent with one more turn must report cached_tokens >= its
// previous prompt rounded down to a block (hybrids included: their linear-attention state is restored from
// a block-boundary snapshot) and still answer as the uncached server. Bit for bit, except hybrids'
// logprobs (kHybridLogprobTol in tiny_models.mjs says why).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, getJson } from './harness.mjs';
import { buildTinyModel, kFamilies, tokenIds, completionAnswer, assertSameAnswer } from './tiny_models.mjs';

const kBlock = 16;
const kMaxTokens = 12;

// Eight prompts: four share a 70-token prefix (suffixes of 3..40 tokens), four stand alone (5..120 tokens).
// Every prompt + max_tokens fits the fixtures' 256-token context.
const shared = tokenIds(70, 1);
const kPrompts = [
  [...shared, ...tokenIds(3, 2)], [...shared, ...tokenIds(17, 3)], [...shared, ...tokenIds(29, 4)],
  [...shared, ...tokenIds(40, 5)], tokenIds(5, 6), tokenIds(23, 7), tokenIds(61, 8), tokenIds(120, 9),
];

const complete = (url, prompt) => postJson(`${url}/v1/completions`, {
  prompt, max_tokens: kMaxTokens, temperature: 0, logprobs: 1,
});

describe('every model family through bunsen serve (CPU)', () => {
  let root;
  const servers = [];
  before(() => { root = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-families-')); });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    fs.rmSync(root, { recursive: true, force: true });
  });

  for (const { fixture, hybrid } of kFamilies) {
    test(`${fixture}: --batch 8 + prefix cache answers as --batch 1 without a cache`, async () => {
      const dir = buildTinyModel(fixture, root);
      const base = ['--device', 'cpu', '--model', dir];
      const [batched, plain] = await Promise.all([
        startServer([...base, '--batch', '8']),
        startServer([...base, '--batch', '1', '--prompt-cache', '0']),
      ]);
      servers.push(batched, plain);
      const s0 = (await getJson(`${batched.url}/stats`)).json;
      assert.equal(s0.kv.block_size, kBlock);
      assert.equal(s0.prompt_cache.enabled, true);
      assert.equal(s0.batch.max_batch, 8);
      assert.equal((await getJson(`${plain.url}/stats`)).json.prompt_cache.enabled, false);

      // All eight at once on the batched server; one after another on the plain one.
      const got = (await Promise.all(kPrompts.map((p) => complete(batched.url, p)))).map(completionAnswer);
      const want = [];
      for (const p of kPrompts) want.push(completionAnswer(await complete(plain.url, p)));
      for (let i = 0; i < kPrompts.length; ++i) {
        assert.equal(want[i].prompt_tokens, kPrompts[i].length);
        assert.ok(want[i].completion_tokens >= 1);
        assertSameAnswer(got[i], want[i], hybrid, `${fixture}: prompt ${i} (${kPrompts[i].length} tokens)`);
      }
      // The batched server really decoded several sequences in one step: one at a time would take a decode
      // step per generated token after each request's first (typically 11-33 steps here, serial is 88).
      const eng = (await getJson(`${batched.url}/stats`)).json.engine;
      const serial = eng.generated_tokens - kPrompts.length;
      assert.ok(eng.decode_steps < serial, `batched decode: ${JSON.stringify(eng)} (serial: ${serial} steps)`);

      // One conversation, then the same with one more turn: the first prompt's full blocks hit.
      const turn1 = [...tokenIds(37, 10), ...shared];  // 107 tokens: 6 full blocks
      const turn2 = [...turn1, ...tokenIds(19, 11)];
      const first = await complete(batched.url, turn1);
      assert.equal(first.status, 200, first.text);
      assert.equal(first.json.usage.prompt_tokens_details.cached_tokens, 0, 'a new prefix misses');
      const second = await complete(batched.url, turn2);
      assert.equal(second.status, 200, second.text);
      const hit = second.json.usage.prompt_tokens_details.cached_tokens;
      const bound = Math.floor(turn1.length / kBlock) * kBlock;
      assert.ok(hit > 0 && hit >= bound, `${fixture}: cached_tokens ${hit} >= ${bound} (previous prompt ${turn1.length})`);
      assert.ok(hit < turn2.length && hit % kBlock === 0, `${fixture}: cached_tokens ${hit}`);
      assertSameAnswer(completionAnswer(first), completionAnswer(await complete(plain.url, turn1)), hybrid,
        `${fixture}: turn 1`);
      const plain2 = await complete(plain.url, turn2);
      assert.equal(plain2.json.usage.prompt_tokens_details.cached_tokens, 0);
      assertSameAnswer(completionAnswer(second), completionAnswer(plain2), hybrid, `${fixture}: turn 2 from the cache`);

      const pc = (await getJson(`${batched.url}/stats`)).json.prompt_cache;
      assert.ok(pc.hits > 0 && pc.hit_tokens >= bound, JSON.stringify(pc));
      if (hybrid) {
        // The hit restored a linear-attention state snapshot taken at a block boundary.
        assert.ok(pc.state_checkpoints.saves > 0 && pc.state_checkpoints.hits > 0, JSON.stringify(pc));
      }
      await Promise.all([batched.stop(), plain.stop()]);
    });
  }
});
