// /v1/chat/completions on the real `bunsen serve` (built-in demo model: random weights, real Qwen3
// tokenizer and template) through the official `openai` npm client: response and chunk shapes, usage,
// greedy and seeded reproducibility, stream == non-stream, logprobs shape and consistency, stop strings,
// length, n choices, and field errors surfacing as the client's typed errors.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

let srv;
let client;
before(async () => {
  srv = await startServer(['--device', 'cpu']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
});
after(async () => { await srv?.stop(); });

const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say something.' }];
// Temperature 2 + a seed: varied (non-newline) text that is still reproducible.
const seeded = (seed, extra = {}) => ({ model: 'demo-qwen3-tiny', messages, max_tokens: 12, temperature: 2, seed, ...extra });

async function collectStream(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe('chat completions', () => {
  test('non-stream shape and usage', async () => {
    const r = await client.chat.completions.create({ messages, max_tokens: 6, temperature: 0 });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, 'demo-qwen3-tiny');
    assert.equal(typeof r.created, 'number');
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.ok(r.usage.prompt_tokens > 5);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 6);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  });

  test('greedy is reproducible and max_tokens ends with length', async () => {
    const p = { messages, max_tokens: 5, temperature: 0, ignore_eos: true };
    const a = await client.chat.completions.create(p);
    const b = await client.chat.completions.create(p);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.equal(a.choices[0].finish_reason, 'length');
    assert.equal(a.usage.completion_tokens, 5);
  });

  test('seed reproducibility; different seeds differ', async () => {
    const a = await client.chat.completions.create(seeded(11));
    const b = await client.chat.completions.create(seeded(11));
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const others = await Promise.all([12, 13, 14].map((s) => client.chat.completions.create(seeded(s))));
    assert.ok(others.some((o) => o.choices[0].message.content !== a.choices[0].message.content),
      'three other seeds all gave the same text');
  });

  test('stream: role chunk, deltas equal the non-stream text, finish, usage chunk', async () => {
    const params = seeded(21);
    const full = await client.chat.completions.create(params);
    const chunks = await collectStream({ ...params, stream_options: { include_usage: true } });
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    const ids = new Set(chunks.map((c) => c.id));
    assert.equal(ids.size, 1);
    assert.match([...ids][0], /^chatcmpl-/);
    let text = '';
    let finish = null;
    for (const c of chunks.slice(0, -1)) {
      assert.equal(c.object, 'chat.completion.chunk');
      const d = c.choices[0].delta;
      text += (d.content ?? '') + (d.reasoning_content ?? '');
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    const m = full.choices[0].message;
    assert.equal(text, (m.content ?? '') + (m.reasoning_content ?? ''));
    assert.equal(finish, full.choices[0].finish_reason);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, full.usage.completion_tokens);
    assert.equal(last.usage.prompt_tokens, full.usage.prompt_tokens);
  });

  test('logprobs: OpenAI shape, top entries sorted, greedy picks the top one', async () => {
    const r = await client.chat.completions.create({ messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    let joined = '';
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.ok(Array.isArray(e.bytes));
      assert.equal(e.top_logprobs.length, 3);
      for (let i = 1; i < 3; ++i) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5);
      joined += Buffer.from(e.bytes).toString('utf8');
    }
    assert.equal(joined, r.choices[0].message.content);
  });

  test('stop string cuts the text where it first occurs', async () => {
    const base = await client.chat.completions.create(seeded(31, { ignore_eos: true }));
    const chars = Array.from(base.choices[0].message.content);
    assert.ok(chars.length >= 4, `need some text: ${JSON.stringify(chars.join(''))}`);
    const text = chars.join('');
    const k = Math.floor(chars.length / 2);
    const stop = chars.slice(k, k + 2).join('');
    const expected = text.slice(0, text.indexOf(stop));
    const r = await client.chat.completions.create(seeded(31, { ignore_eos: true, stop: [stop] }));
    assert.equal(r.choices[0].message.content, expected);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const chunks = await collectStream(seeded(31, { ignore_eos: true, stop }));
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), expected);
  });

  test('n = 2: two choices, each reproducible by its seed', async () => {
    const r = await client.chat.completions.create(seeded(41, { n: 2 }));
    assert.equal(r.choices.length, 2);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    const again = await client.chat.completions.create(seeded(41, { n: 2 }));
    assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
    const chunks = await collectStream(seeded(41, { n: 2 }));
    const texts = ['', ''];
    for (const c of chunks) for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? '';
    assert.deepEqual(texts, r.choices.map((c) => c.message.content));
  });

  test('field errors arrive as typed client errors naming the param', async () => {
    for (const [extra, param] of [[{ max_tokens: 0 }, 'max_tokens'], [{ top_p: 2 }, 'top_p'],
      [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'], [{ n: 1000000 }, 'n']]) {
      await assert.rejects(client.chat.completions.create({ messages, ...extra }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.error?.param ?? e.param, param);
        return true;
      });
    }
    await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      assert.equal(e.code, 'model_not_found');
      return true;
    });
  });
});
