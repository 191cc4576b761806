// Bad input at the transport, JSON and security layers, sent raw (node:net) to the real binary: each case
// gets the right 4xx in the dialect's error shape and is followed by a normal request that succeeds, so
// the server is shown to keep serving. (Field-level cases — max_tokens, top_p, stop strings, ... — live
// with the dialect tests.)
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, rawRequest, getJson, postJson, isOpenAIError, isAnthropicError } from './harness.mjs';

const kMaxBody = 64 * 1024;
const kReadTimeoutS = 2;
const kAllowedOrigin = 'http://app.example';

let srv;
before(async () => {
  srv = await startServer(['--device', 'cpu', '--ctx', '1024', '--max-body', '64KB', '--read-timeout',
    String(kReadTimeoutS), '--allowed-origins', kAllowedOrigin]);
});
after(async () => { await srv?.stop(); });

const chatBody = (extra = {}) => JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0, ...extra });

// A raw POST with Content-Length framing; `body` is a string or a Buffer.
function post(path, body, headers = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  let head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${buf.length}\r\nConnection: close\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  return rawRequest(srv.port, Buffer.concat([Buffer.from(head + '\r\n'), buf]));
}

// The follow-up every case ends with: a normal chat completion succeeds.
async function assertStillServing() {
  const r = await postJson(`${srv.url}/v1/chat/completions`, chatBody());
  assert.equal(r.status, 200, `normal request after the bad one: ${r.text}`);
  assert.equal(r.json.object, 'chat.completion');
}

function assertOpenAI400(r, what) {
  assert.equal(r.status, 400, `${what}: ${r.text}`);
  const j = JSON.parse(r.body);
  assert.ok(isOpenAIError(j), `${what}: OpenAI error shape: ${r.body}`);
  assert.equal(j.error.type, 'invalid_request_error');
  return j;
}

describe('malformed JSON', () => {
  test('truncated JSON -> 400', async () => {
    const full = chatBody();
    assertOpenAI400(await post('/v1/chat/completions', full.slice(0, full.length - 5)), 'truncated');
    await assertStillServing();
  });

  test('NaN literal -> 400', async () => {
    assertOpenAI400(await post('/v1/chat/completions', chatBody().replace('"temperature":0', '"temperature":NaN')), 'NaN');
    await assertStillServing();
  });

  test('nesting depth 10,000 -> 400 (no crash)', async () => {
    const body = `{"messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(10000)}${']'.repeat(10000)}}`;
    assert.ok(body.length < kMaxBody);
    const j = assertOpenAI400(await post('/v1/chat/completions', body), 'depth');
    assert.match(j.error.message, /dep|nest/i);
    await assertStillServing();
  });

  test('Anthropic route: malformed JSON -> 400 in Anthropic shape', async () => {
    const r = await post('/v1/messages', '{"model": "x", "max_tokens": 5, "messages": [');
    assert.equal(r.status, 400, r.text);
    const j = JSON.parse(r.body);
    assert.ok(isAnthropicError(j), r.body);
    assert.equal(j.error.type, 'invalid_request_error');
    await assertStillServing();
  });
});

describe('empty or wrong-type body', () => {
  test('empty body -> 400', async () => {
    assertOpenAI400(await post('/v1/chat/completions', ''), 'empty');
    await assertStillServing();
  });

  for (const [name, body] of [['array', '[]'], ['string', '"hello"'], ['number', '42'], ['null', 'null']]) {
    test(`JSON ${name} instead of an object -> 400`, async () => {
      const j = assertOpenAI400(await post('/v1/chat/completions', body), name);
      assert.match(j.error.message, /object/);
      await assertStillServing();
    });
  }

  test('messages of the wrong type -> 400 naming the field', async () => {
    const j = assertOpenAI400(await post('/v1/chat/completions', '{"messages": "hi"}'), 'messages string');
    assert.match(`${j.error.param} ${j.error.message}`, /messages/);
    await assertStillServing();
  });
});

describe('transport limits', () => {
  test('body over the cap -> 413 before the body is sent', async () => {
    // Only the head goes out, declaring 10 MB: the answer must come without waiting for the body.
    const r = await rawRequest(srv.port, `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`, { timeoutMs: 5000 });
    assert.equal(r.timedOut, false, 'answered without the body');
    assert.equal(r.status, 413, r.text);
    assert.ok(isOpenAIError(JSON.parse(r.body)), r.body);
    await assertStillServing();
  });

  test('body over the cap on the Anthropic route -> 413 in Anthropic shape', async () => {
    const r = await rawRequest(srv.port, `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${kMaxBody + 1}\r\n\r\n`, { timeoutMs: 5000 });
    assert.equal(r.status, 413, r.text);
    const j = JSON.parse(r.body);
    assert.ok(isAnthropicError(j), r.body);
    assert.equal(j.error.type, 'request_too_large');
    await assertStillServing();
  });

  test('chunked body without terminator times out (408/400) and does not stall other clients', async () => {
    const stalled = rawRequest(srv.port, `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"mes\r\n`, { timeoutMs: (kReadTimeoutS + 5) * 1000 });
    // While it hangs, another client is served at once.
    await new Promise((r) => setTimeout(r, 200));
    const t0 = performance.now();
    const h = await getJson(`${srv.url}/health`);
    const ms = performance.now() - t0;
    assert.equal(h.status, 200);
    assert.ok(ms < 1000, `health answered in ${ms.toFixed(1)} ms while a chunked body hangs`);
    const r = await stalled;
    assert.equal(r.timedOut, false, 'the server gave up on the body itself');
    assert.ok([400, 408].includes(r.status), `status ${r.status}: ${r.text}`);
    assert.ok(r.ms >= kReadTimeoutS * 1000 - 200, `timed out after ${r.ms.toFixed(0)} ms`);
    await assertStillServing();
  });

  test('1 MB header -> 431', async () => {
    const r = await rawRequest(srv.port, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(1 << 20)}\r\n\r\n`);
    assert.equal(r.status, 431, r.text.slice(0, 300));
    assert.ok(isOpenAIError(JSON.parse(r.body)), r.body);
    await assertStillServing();
  });

  test('garbage instead of HTTP -> 400 and the connection closes', async () => {
    const r = await rawRequest(srv.port, 'HELLO WORLD\r\n\r\n');
    assert.equal(r.status, 400, r.text);
    await assertStillServing();
  });
});

describe('text encoding', () => {
  test('invalid UTF-8 in content -> 400', async () => {
    const body = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"ab'), Buffer.from([0xff, 0xc3, 0x28]),
      Buffer.from('"}],"max_tokens":2}')]);
    const j = assertOpenAI400(await post('/v1/chat/completions', body), 'invalid utf-8');
    assert.match(j.error.message, /UTF-8/i);
    await assertStillServing();
  });

  test('lone surrogate escape in content -> 400', async () => {
    const j = assertOpenAI400(await post('/v1/chat/completions', '{"messages":[{"role":"user","content":"x\\ud800y"}],"max_tokens":2}'), 'lone surrogate');
    assert.match(j.error.message, /surrogate/i);
    await assertStillServing();
  });

  test('lone low surrogate on the Anthropic route -> 400 in Anthropic shape', async () => {
    const r = await post('/v1/messages', '{"model":"x","max_tokens":2,"messages":[{"role":"user","content":"\\udc00"}]}');
    assert.equal(r.status, 400, r.text);
    assert.ok(isAnthropicError(JSON.parse(r.body)), r.body);
    await assertStillServing();
  });
});

describe('DNS-rebinding defence (no key set)', () => {
  test('foreign Origin -> 403 in OpenAI shape', async () => {
    const r = await post('/v1/chat/completions', chatBody(), { Origin: 'http://evil.example' });
    assert.equal(r.status, 403, r.text);
    const j = JSON.parse(r.body);
    assert.ok(isOpenAIError(j), r.body);
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    await assertStillServing();
  });

  test('foreign Origin on /v1/messages -> 403 in Anthropic shape', async () => {
    const r = await post('/v1/messages', '{"model":"x","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}', { Origin: 'https://evil.example' });
    assert.equal(r.status, 403, r.text);
    const j = JSON.parse(r.body);
    assert.ok(isAnthropicError(j), r.body);
    assert.equal(j.error.type, 'permission_error');
    await assertStillServing();
  });

  test('foreign Host (rebound DNS name) -> 403, even for GET', async () => {
    const r = await rawRequest(srv.port, 'GET /v1/models HTTP/1.1\r\nHost: attacker.example:8080\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 403, r.text);
    const r2 = await rawRequest(srv.port, 'GET /stats HTTP/1.1\r\nHost: 127.0.0.1.attacker.example\r\nConnection: close\r\n\r\n');
    assert.equal(r2.status, 403, r2.text);
    await assertStillServing();
  });

  test('"null" Origin and a foreign preflight are refused', async () => {
    const r = await post('/v1/chat/completions', chatBody(), { Origin: 'null' });
    assert.equal(r.status, 403, r.text);
    const pre = await rawRequest(srv.port, 'OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n');
    assert.equal(pre.status, 403, pre.text);
    await assertStillServing();
  });

  test('loopback names and the listed origin pass', async () => {
    for (const host of ['localhost', `localhost:${srv.port}`, `127.0.0.1:${srv.port}`, `[::1]:${srv.port}`]) {
      const r = await rawRequest(srv.port, `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 200, `${host}: ${r.text}`);
    }
    const local = await post('/v1/chat/completions', chatBody(), { Origin: 'http://localhost:5173' });
    assert.equal(local.status, 200, local.text);
    const listed = await post('/v1/chat/completions', chatBody(), { Origin: kAllowedOrigin });
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.headers['access-control-allow-origin'], kAllowedOrigin);
  });
});
