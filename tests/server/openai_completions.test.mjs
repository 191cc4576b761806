// /v1/completions, /v1/models, /tokenize and /detokenize on the real `bunsen serve` (demo model) through
// the official `openai` npm client (and fetch for the non-OpenAI routes): text and token prompts, echo,
// legacy logprobs, stream, usage, seed reproducibility, model lookup and 404, tokenizer round trips.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, postJson } from './harness.mjs';

let srv;
let client;
before(async () => {
  srv = await startServer(['--device', 'cpu']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
});
after(async () => { await srv?.stop(); });

describe('completions', () => {
  test('string prompt: shape, usage, seed reproducibility', async () => {
    const p = { model: 'demo-qwen3-tiny', prompt: 'Once upon a time', max_tokens: 8, temperature: 2, seed: 5 };
    const a = await client.completions.create(p);
    const b = await client.completions.create(p);
    assert.match(a.id, /^cmpl-/);
    assert.equal(a.object, 'text_completion');
    assert.equal(a.choices.length, 1);
    assert.equal(typeof a.choices[0].text, 'string');
    assert.equal(a.choices[0].text, b.choices[0].text);
    const tk = await postJson(`${srv.url}/tokenize`, { prompt: 'Once upon a time' });
    assert.equal(a.usage.prompt_tokens, tk.json.count);
    assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
  });

  test('token-array prompt equals the same text prompt; echo prepends it', async () => {
    const tk = await postJson(`${srv.url}/tokenize`, { prompt: 'Hello there' });
    const p = { max_tokens: 5, temperature: 0 };
    const byText = await client.completions.create({ ...p, prompt: 'Hello there' });
    const byIds = await client.completions.create({ ...p, prompt: tk.json.tokens });
    assert.equal(byIds.choices[0].text, byText.choices[0].text);
    const echoed = await client.completions.create({ ...p, prompt: 'Hello there', echo: true });
    assert.equal(echoed.choices[0].text, 'Hello there' + byText.choices[0].text);
  });

  test('legacy logprobs shape', async () => {
    const r = await client.completions.create({ prompt: 'abc', max_tokens: 4, temperature: 0, logprobs: 2, ignore_eos: true });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.top_logprobs.length, 4);
    assert.deepEqual(lp.text_offset, lp.text_offset.slice().sort((x, y) => x - y));
    assert.equal(lp.text_offset[0], 0);
    for (let i = 0; i < 4; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1 && Object.keys(lp.top_logprobs[i]).length <= 3);
      assert.ok(lp.tokens[i] in lp.top_logprobs[i]);
    }
  });

  test('stream: text chunks join to the non-stream text, then usage and [DONE]', async () => {
    const p = { prompt: 'The sky is', max_tokens: 6, temperature: 2, seed: 9 };
    const full = await client.completions.create(p);
    const stream = await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    let finish = null;
    for await (const c of stream) {
      assert.equal(c.object, 'text_completion');
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        text += ch.text;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.equal(text, full.choices[0].text);
    assert.equal(finish, full.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, full.usage.completion_tokens);
  });

  test('suffix and bad token ids are refused', async () => {
    await assert.rejects(client.completions.create({ prompt: 'a', suffix: 'b' }), (e) => e.status === 400 && e.param === 'suffix');
    await assert.rejects(client.completions.create({ prompt: [1, -1] }), (e) => e.status === 400 && e.param === 'prompt');
    await assert.rejects(client.completions.create({ prompt: [1, 10_000_000] }), (e) => e.status === 400 && e.param === 'prompt');
  });
});

describe('models and tokenizer routes', () => {
  test('list and retrieve; unknown id is a 404', async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    const id = list.data[0].id;
    assert.equal(id, 'demo-qwen3-tiny');
    assert.equal(list.data[0].object, 'model');
    const one = await client.models.retrieve(id);
    assert.equal(one.id, id);
    await assert.rejects(client.models.retrieve('nope-model'), (e) => e instanceof OpenAI.NotFoundError);
  });

  test('tokenize/detokenize round trip and chat tokenization', async () => {
    const tk = await postJson(`${srv.url}/tokenize`, { prompt: 'Grüße, 世界!' });
    assert.equal(tk.status, 200);
    assert.equal(tk.json.count, tk.json.tokens.length);
    assert.ok(tk.json.max_model_len > 0);
    const dt = await postJson(`${srv.url}/detokenize`, { tokens: tk.json.tokens });
    assert.equal(dt.json.prompt, 'Grüße, 世界!');
    const chat = await postJson(`${srv.url}/tokenize`, { messages: [{ role: 'user', content: 'hi' }] });
    const text = await postJson(`${srv.url}/detokenize`, { tokens: chat.json.tokens });
    assert.equal(text.json.prompt, '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    const bad = await postJson(`${srv.url}/detokenize`, { tokens: [-1] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'tokens');
  });
});
