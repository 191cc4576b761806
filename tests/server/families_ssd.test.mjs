// SSD tier of the prefix cache across a restart for every model family (issue 7 + 9), end to end on the
// real `bunsen serve` (CPU), hybrids (gated DeltaNet: qwen3_5_text, qwen3_next) being the point: a tiny
// model per family (tiny_models.mjs, from its golden fixture) serves a long prompt with --ssd-cache DIR;
// once /stats shows the snapshot written the server stops; a new server on the same DIR must answer the
// same prompt with cached_tokens > 0 (>= the prompt rounded down to a block, minus one block), an SSD hit
// in /stats (hybrids: a restored linear-attention state), and exactly the cold run's tokens and logprobs
// (both runs prefill in the same pieces); and the answer of a server without any cache (bit for bit except
// hybrids' logprobs, kHybridLogprobTol).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, getJson, waitForSsdWrites } from './harness.mjs';
import { buildTinyModel, kFamilies, tokenIds, completionAnswer, assertSameAnswer } from './tiny_models.mjs';

const kBlock = 16;
const prompt = tokenIds(150, 12345);  // 9 full blocks; + max_tokens within the fixtures' 256 context

const complete = (url) => postJson(`${url}/v1/completions`, { prompt, max_tokens: 12, temperature: 0, logprobs: 1 });

describe('every model family hits the SSD tier after a restart', () => {
  let root;
  const servers = [];
  before(() => { root = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-families-ssd-')); });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    fs.rmSync(root, { recursive: true, force: true });
  });

  for (const { fixture, hybrid } of kFamilies) {
    test(`${fixture}: a long prompt hits from SSD after a restart and answers as the cold run`, async () => {
      const model = buildTinyModel(fixture, path.join(root, 'models'));
      const ssd = fs.mkdtempSync(path.join(root, `ssd-${fixture}-`));
      const args = ['--device', 'cpu', '--model', model, '--batch', '8'];

      const plain = await startServer([...args, '--prompt-cache', '0']);
      servers.push(plain);
      const ref = completionAnswer(await complete(plain.url));
      await plain.stop();

      const a = await startServer([...args, '--ssd-cache', ssd]);
      servers.push(a);
      const s0 = (await getJson(`${a.url}/stats`)).json;
      assert.equal(s0.kv.block_size, kBlock);
      assert.equal(s0.ssd.enabled, true, JSON.stringify(s0.ssd));
      const cold = await complete(a.url);
      assert.equal(cold.status, 200, cold.text);
      assert.equal(cold.json.usage.prompt_tokens, prompt.length);
      assert.equal(cold.json.usage.prompt_tokens_details.cached_tokens, 0);
      await waitForSsdWrites(a.url, 1);
      await a.stop();
      assert.ok(fs.readdirSync(ssd).some((f) => f.endsWith('.kvs')), 'snapshot files on disk');

      const b = await startServer([...args, '--ssd-cache', ssd]);
      servers.push(b);
      const sb = (await getJson(`${b.url}/stats`)).json.ssd;
      assert.ok(sb.entries >= 1 && sb.bytes > 0, JSON.stringify(sb));
      const again = await complete(b.url);
      assert.equal(again.status, 200, again.text);
      const hit = again.json.usage.prompt_tokens_details.cached_tokens;
      const bound = Math.floor(prompt.length / kBlock) * kBlock - kBlock;
      assert.ok(hit > 0 && hit >= bound, `${fixture}: cached_tokens ${hit} >= ${bound} (prompt ${prompt.length})`);
      assert.ok(hit < prompt.length && hit % kBlock === 0, `${fixture}: cached_tokens ${hit}`);
      const got = completionAnswer(again);
      assert.deepEqual(got, completionAnswer(cold), `${fixture}: the restored run answers as the cold one`);
      assertSameAnswer(got, ref, hybrid, `${fixture}: as without a cache`);

      const s = (await getJson(`${b.url}/stats`)).json;
      assert.ok(s.ssd.hits >= 1 && s.ssd.hit_tokens >= bound, JSON.stringify(s.ssd));
      assert.equal(s.ssd.quarantined, 0, JSON.stringify(s.ssd));
      assert.ok(s.ssd.restored_bytes > 0, JSON.stringify(s.ssd));
      if (hybrid) assert.ok(s.prompt_cache.state_checkpoints.hits >= 1, JSON.stringify(s.prompt_cache));
      await b.stop();
    });
  }
});
