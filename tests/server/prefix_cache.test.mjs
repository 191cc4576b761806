// Prefix cache end to end on the real `bunsen serve` (built-in demo model, CPU): a chat conversation, then
// the same conversation with the reply and one more user turn (greedy). The second request must report
// cached prompt tokens (OpenAI usage.prompt_tokens_details.cached_tokens, Anthropic
// cache_read_input_tokens) and produce exactly the text of a server started with `--prompt-cache 0`;
// /stats and /metrics show the cache's entries, hits and misses. (The demo model's greedy text is mostly
// newlines, so a seeded temperature-2 sample with logprobs is compared as well.)
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, getJson } from './harness.mjs';

const kBlock = 16;  // the server's KV block size (asserted through /stats below)
// A long system prompt so the first prompt spans several full blocks.
const system = 'You are a careful assistant. ' + Array.from({ length: 12 }, (_, i) => `Rule ${i + 1}: answer briefly and stay on topic.`).join(' ');
const turn1 = [{ role: 'system', content: system }, { role: 'user', content: 'Name three colors of the rainbow.' }];

const chat = (url, messages) =>
  postJson(`${url}/v1/chat/completions`, { messages, max_tokens: 12, temperature: 0 });

function conversation2(first) {
  const reply = first.json.choices[0].message.content ?? '';
  return [...turn1, { role: 'assistant', content: reply }, { role: 'user', content: 'And two more, please.' }];
}

describe('prefix cache (device tier)', () => {
  let cached;
  let plain;
  before(async () => {
    [cached, plain] = await Promise.all([
      startServer(['--device', 'cpu', '--ctx', '2048', '--batch', '2']),
      startServer(['--device', 'cpu', '--ctx', '2048', '--batch', '2', '--prompt-cache', '0']),
    ]);
  });
  after(async () => { await Promise.all([cached?.stop(), plain?.stop()]); });

  test('a conversation re-sent with one more turn hits the cache and answers as without it', async () => {
    const s0 = (await getJson(`${cached.url}/stats`)).json;
    assert.equal(s0.kv.block_size, kBlock);
    assert.equal(s0.prompt_cache.enabled, true);

    const first = await chat(cached.url, turn1);
    assert.equal(first.status, 200, first.text);
    const p1 = first.json.usage.prompt_tokens;
    assert.ok(p1 >= 3 * kBlock, `the first prompt spans several blocks (${p1} tokens)`);
    assert.equal(first.json.usage.prompt_tokens_details.cached_tokens, 0, 'nothing cached yet');

    const messages2 = conversation2(first);
    const second = await chat(cached.url, messages2);
    assert.equal(second.status, 200, second.text);
    const p2 = second.json.usage.prompt_tokens;
    assert.ok(p2 > p1);
    const hit = second.json.usage.prompt_tokens_details.cached_tokens;
    // Bound: the first request left every full block of its computed tokens in the cache (at least the
    // first floor(p1 / 16) blocks). The second prompt starts with the first one as text, but the token at
    // the boundary ("assistant\n" followed by the reply) may tokenize differently, which can cost the
    // block holding it: so at least floor(p1 / 16) * 16 - 16 tokens hit. Hits are whole blocks and never
    // include the last prompt token.
    const bound = Math.floor(p1 / kBlock) * kBlock - kBlock;
    assert.ok(hit >= bound, `cached_tokens ${hit} >= ${bound} (first prompt ${p1} tokens)`);
    assert.equal(hit % kBlock, 0, 'hits are whole blocks');
    assert.ok(hit < p2, 'the last prompt token always runs');

    // The same request on a server without the cache: the same text (greedy, CPU kernels are
    // batch-invariant, so cached K/V equal recomputed K/V bit for bit).
    const firstPlain = await chat(plain.url, turn1);
    assert.equal(firstPlain.json.choices[0].message.content, first.json.choices[0].message.content);
    const secondPlain = await chat(plain.url, messages2);
    assert.equal(secondPlain.status, 200, secondPlain.text);
    assert.equal(secondPlain.json.usage.prompt_tokens, p2);
    assert.equal(secondPlain.json.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(second.json.choices[0].message.content, secondPlain.json.choices[0].message.content);
    assert.equal(second.json.choices[0].finish_reason, secondPlain.json.choices[0].finish_reason);

    // The demo model's greedy text is mostly newlines, so also compare a seeded high-temperature sample
    // with logprobs: identical logits rows give the same draws and the same logprobs, to the last digit.
    const sampled = (url) => postJson(`${url}/v1/chat/completions`, {
      messages: messages2, max_tokens: 16, temperature: 2, seed: 7, logprobs: true, top_logprobs: 2,
    });
    const [sc, sn] = await Promise.all([sampled(cached.url), sampled(plain.url)]);
    assert.equal(sc.status, 200, sc.text);
    assert.ok(sc.json.usage.prompt_tokens_details.cached_tokens >= bound);
    assert.equal(sc.json.choices[0].message.content, sn.json.choices[0].message.content);
    assert.ok(new Set(sc.json.choices[0].logprobs.content.map((t) => t.token)).size > 1, 'varied tokens');
    assert.deepEqual(sc.json.choices[0].logprobs, sn.json.choices[0].logprobs);

    // Anthropic dialect: the same conversation reports its hit as cache_read_input_tokens.
    const anth = await postJson(`${cached.url}/v1/messages`, {
      model: 'default', max_tokens: 8, temperature: 0, system, messages: messages2.slice(1),
    }, { headers: { 'anthropic-version': '2023-06-01' } });
    assert.equal(anth.status, 200, anth.text);
    assert.ok(anth.json.usage.cache_read_input_tokens >= bound, JSON.stringify(anth.json.usage));

    const s = (await getJson(`${cached.url}/stats`)).json.prompt_cache;
    assert.equal(s.enabled, true);
    assert.ok(s.entries > 0 && s.bytes > 0, JSON.stringify(s));
    assert.ok(s.hits > 0 && s.misses > 0, JSON.stringify(s));
    assert.ok(s.hit_ratio > 0 && s.hit_ratio < 1, JSON.stringify(s));
    const sp = (await getJson(`${plain.url}/stats`)).json.prompt_cache;
    assert.equal(sp.enabled, false);
    assert.equal(sp.entries, 0);

    const metrics = await (await fetch(`${cached.url}/metrics`)).text();
    const entries = metrics.match(/^bunsen_prefix_cache_entries (\d+)$/m);
    assert.ok(entries && Number(entries[1]) > 0, 'entries gauge');
    const hits = metrics.match(/^bunsen_prefix_cache_hits (\d+)$/m);
    assert.ok(hits && Number(hits[1]) > 0, 'hits gauge');
    const ratio = metrics.match(/^bunsen_prefix_cache_hit_ratio ([0-9.e+-]+)$/m);
    assert.ok(ratio && Number(ratio[1]) > 0, 'hit ratio gauge');
  });

  test('--help documents --prompt-cache and --no-prefix-cache', async () => {
    const { spawnSync } = await import('node:child_process');
    const { bunsenExe } = await import('./harness.mjs');
    const r = spawnSync(bunsenExe, ['serve', '--help'], { encoding: 'utf8' });
    const out = r.stdout + r.stderr;
    assert.match(out, /--prompt-cache/);
    assert.match(out, /--no-prefix-cache/);
  });
});
