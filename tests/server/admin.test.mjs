// Admin routes and auth against the real binary on the demo model: /health, /stats and /metrics content,
// and API-key auth on/off with raw fetch and the official `openai` client (wrong key 401 in each dialect's
// shape, Bearer and x-api-key accepted, /health open).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, getJson, postJson, isOpenAIError, isAnthropicError } from './harness.mjs';

const kCtx = 2048;
const kBatch = 4;

describe('admin routes (no key)', () => {
  let srv;
  before(async () => { srv = await startServer(['--device', 'cpu', '--ctx', String(kCtx), '--batch', String(kBatch)]); });
  after(async () => { await srv?.stop(); });

  test('GET /health is ok', async () => {
    const r = await getJson(`${srv.url}/health`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ok' });
    assert.match(r.headers.get('content-type'), /application\/json/);
  });

  test('GET /stats reports model, queue, KV, admission and batch settings', async () => {
    const r = await getJson(`${srv.url}/stats`);
    assert.equal(r.status, 200);
    const s = r.json;
    assert.equal(s.server.name, 'bunsen');
    assert.match(s.server.version, /^\d+\.\d+\.\d+/);
    assert.equal(typeof s.model.id, 'string');
    assert.ok(s.model.id.length > 0);
    assert.equal(s.model.device, 'cpu');
    assert.ok(s.model.dir.length > 0);
    assert.ok(s.model.weights_bytes > 0, 'weights size is reported');
    assert.ok(s.uptime_s >= 0);
    assert.equal(s.queue.running, 0);
    assert.equal(s.queue.waiting, 0);
    assert.ok(s.kv.blocks_total > 0);
    assert.equal(s.kv.blocks_used + s.kv.blocks_free, s.kv.blocks_total);
    assert.equal(s.kv.blocks_used, 0, 'an idle server holds no KV blocks');
    assert.equal(s.kv.block_size, 16);
    assert.ok(s.kv.blocks_total * s.kv.block_size >= kCtx, 'the pool holds one full-context sequence');
    assert.equal(s.prompt_cache.enabled, true, 'the prefix cache is on by default');
    for (const k of ['entries', 'bytes', 'hits', 'misses']) assert.equal(s.prompt_cache[k], 0);
    assert.equal(s.admission.max_context, kCtx);
    assert.ok(s.admission.max_request_tokens > 0 && s.admission.max_request_tokens <= kCtx);
    assert.equal(s.batch.max_batch, kBatch);
    assert.ok(s.batch.max_num_batched_tokens >= kBatch);
    assert.equal(typeof s.requests.total, 'number');
  });

  test('/stats counts requests and generated tokens', async () => {
    const before = (await getJson(`${srv.url}/stats`)).json;
    const chat = await postJson(`${srv.url}/v1/chat/completions`, {
      model: before.model.id, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0,
    });
    assert.equal(chat.status, 200, chat.text);
    // The engine's counters are a snapshot refreshed once per step: give it a moment after the answer.
    let after;
    for (let i = 0; i < 50; ++i) {
      after = (await getJson(`${srv.url}/stats`)).json;
      if (after.queue.running === 0 && after.engine.requests_finished > before.engine.requests_finished) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(after.requests.total >= before.requests.total + 2, 'the chat and the first /stats are counted');
    assert.ok(after.engine.generated_tokens >= before.engine.generated_tokens + 1);
    assert.ok(after.engine.requests_finished >= before.engine.requests_finished + 1);
    assert.equal(after.queue.running, 0);
    assert.ok(after.tokens.generated >= before.tokens.generated + 1, 'service-side token counter');
  });

  test('GET /metrics is Prometheus text with request counts and engine gauges', async () => {
    await getJson(`${srv.url}/health`);
    const res = await fetch(`${srv.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/plain/);
    const text = await res.text();
    const m = text.match(/^bunsen_requests_total\{route="\/health",status="200"\} (\d+)$/m);
    assert.ok(m && Number(m[1]) >= 1, 'health requests are counted by route and status');
    for (const g of ['bunsen_running_sequences', 'bunsen_waiting_sequences', 'bunsen_kv_blocks_used',
      'bunsen_kv_blocks_free', 'bunsen_prefix_cache_hit_ratio']) {
      assert.match(text, new RegExp(`^# TYPE ${g} gauge$`, 'm'), g);
      assert.match(text, new RegExp(`^${g} [0-9.e+-]+$`, 'm'), g);
    }
    assert.match(text, /^bunsen_prefix_cache_hit_ratio 0$/m);
    assert.match(text, /^bunsen_time_to_first_token_seconds_bucket\{le="\+Inf"\} \d+$/m);
    assert.match(text, /^bunsen_inter_token_latency_seconds_count \d+$/m);
    assert.match(text, /^bunsen_prompt_tokens_total \d+$/m);
    assert.match(text, /^bunsen_generation_tokens_total \d+$/m);
    // Every sample line is `name{labels} value` (the exposition format's grammar, simplified).
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? (-?[0-9.e+-]+|\+Inf|NaN)$/, line);
    }
    // Histogram buckets are cumulative.
    const buckets = [...text.matchAll(/^bunsen_request_duration_seconds_bucket\{le="[^"]+"\} (\d+)$/gm)].map((x) => Number(x[1]));
    assert.ok(buckets.length >= 2);
    for (let i = 1; i < buckets.length; ++i) assert.ok(buckets[i] >= buckets[i - 1]);
  });

  test('without a key every route is open and the openai client works', async () => {
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'anything' });
    const models = await client.models.list();
    assert.ok(models.data.length >= 1);
  });
});

describe('auth with --api-key', () => {
  const key = 'sk-test-secret-123';
  let srv;
  before(async () => { srv = await startServer(['--device', 'cpu', '--ctx', '1024', '--api-key', key]); });
  after(async () => { await srv?.stop(); });

  test('/health needs no key', async () => {
    const r = await getJson(`${srv.url}/health`);
    assert.equal(r.status, 200);
  });

  test('missing key: 401 in OpenAI shape with WWW-Authenticate', async () => {
    const r = await getJson(`${srv.url}/stats`);
    assert.equal(r.status, 401);
    assert.ok(isOpenAIError(r.json), r.text);
    assert.equal(r.json.error.type, 'authentication_error');
    assert.match(r.headers.get('www-authenticate') || '', /Bearer/);
  });

  test('wrong key: 401 (Bearer and x-api-key)', async () => {
    assert.equal((await getJson(`${srv.url}/stats`, { headers: { authorization: `Bearer ${key}x` } })).status, 401);
    assert.equal((await getJson(`${srv.url}/stats`, { headers: { 'x-api-key': key.slice(0, -1) } })).status, 401);
    assert.equal((await getJson(`${srv.url}/metrics`, { headers: { authorization: 'Basic abc' } })).status, 401);
  });

  test('Anthropic routes answer 401 in Anthropic shape', async () => {
    const r = await postJson(`${srv.url}/v1/messages`, { model: 'x', max_tokens: 1, messages: [] }, { headers: { 'x-api-key': 'nope' } });
    assert.equal(r.status, 401);
    assert.ok(isAnthropicError(r.json), r.text);
    assert.equal(r.json.error.type, 'authentication_error');
  });

  test('Bearer and x-api-key are both accepted', async () => {
    const a = await getJson(`${srv.url}/stats`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(a.status, 200, a.text);
    const b = await getJson(`${srv.url}/stats`, { headers: { 'x-api-key': key } });
    assert.equal(b.status, 200, b.text);
    const m = await fetch(`${srv.url}/metrics`, { headers: { 'x-api-key': key } });
    assert.equal(m.status, 200);
  });

  test('openai client: right key works, wrong key raises AuthenticationError', async () => {
    const good = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: key });
    const models = await good.models.list();
    assert.ok(models.data.length >= 1);
    const bad = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  });

  test('with a key, a foreign Host is served (the key is the defence)', async () => {
    const { rawRequest } = await import('./harness.mjs');
    const r = await rawRequest(srv.port, `GET /stats HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
    assert.equal(r.status, 200, r.text);
  });
});
