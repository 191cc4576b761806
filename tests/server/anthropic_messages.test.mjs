// The Anthropic dialect through the official @anthropic-ai/sdk client against the real `bunsen serve`:
// the demo model (real generation: message shape, usage, the streaming event order, finalMessage,
// count_tokens) and `--replay` servers whose output is fixed Qwen3 text (thinking + text blocks, tool_use
// blocks and the tool_result round trip, stop_sequence), plus 4xx errors in Anthropic's shape.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, postJson, isAnthropicError } from './harness.mjs';

const kReasoning = '<think>\nplan</think>\n\nHello';
const kToolCall = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const tools = [{
  name: 'get_weather', description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const model = 'default';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-anthropic-'));
const servers = [];

async function server(args) {
  const srv = await startServer(['--device', 'cpu', ...args]);
  servers.push(srv);
  return { srv, client: new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 }) };
}

async function replay(name, texts) {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify({ texts }));
  return server(['--replay', file]);
}

// The grammar: message_start, then blocks (start, deltas, stop), message_delta, message_stop; pings anywhere.
function assertGrammar(types) {
  const t = types.filter((x) => x !== 'ping');
  assert.equal(t[0], 'message_start');
  assert.deepEqual(t.slice(-2), ['message_delta', 'message_stop']);
  let open = false;
  for (const x of t.slice(1, -2)) {
    if (x === 'content_block_start') { assert.ok(!open, 'block started inside a block'); open = true; }
    else if (x === 'content_block_delta') assert.ok(open, 'delta outside a block');
    else if (x === 'content_block_stop') { assert.ok(open, 'stop without a block'); open = false; }
    else assert.fail(`unexpected event ${x}`);
  }
  assert.ok(!open, 'a block was never stopped');
}

let demo, thinking, tooling, stopper;
before(async () => {
  [demo, thinking, tooling, stopper] = await Promise.all([
    server(['--temperature', '0']),
    replay('thinking', [kReasoning]),
    replay('tool', [kToolCall, 'It is sunny.']),
    replay('stop', ['alpha beta STOP gamma']),
  ]);
});
after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('anthropic messages on the demo model', () => {
  test('non-stream message shape and usage', async () => {
    const m = await demo.client.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'Hello' }] });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.match(m.id, /^msg_/);
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
    assert.ok(m.usage.input_tokens > 0);
    assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 8);
    assert.equal(m.usage.cache_read_input_tokens, 0);
  });

  test('stream event order and finalMessage', async () => {
    const stream = demo.client.messages.stream({ model, max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }] });
    const types = [];
    for await (const ev of stream) types.push(ev.type);
    assertGrammar(types);
    const final = await stream.finalMessage();
    assert.equal(final.usage.output_tokens <= 8, true);
    assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
  });

  test('raw stream carries a ping right after message_start', async () => {
    const stream = await demo.client.messages.create({ model, max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Hi' }] });
    const types = [];
    for await (const ev of stream) types.push(ev.type);
    // The SDK drops pings from the typed stream; the grammar must still hold.
    assertGrammar(types);
    const raw = await fetch(`${demo.srv.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    const text = await raw.text();
    const names = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    assert.deepEqual(names.slice(0, 2), ['message_start', 'ping']);
    assertGrammar(names);
  });

  test('count_tokens equals the input_tokens of the same request', async () => {
    const body = { model, system: 'Be brief.', messages: [{ role: 'user', content: 'What is 2+2?' }], tools };
    const counted = await demo.client.messages.countTokens(body);
    const m = await demo.client.messages.create({ ...body, max_tokens: 1 });
    assert.equal(counted.input_tokens, m.usage.input_tokens);
  });

  test('bad input gets Anthropic-shaped 4xx errors and the server keeps serving', async () => {
    await assert.rejects(demo.client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e.status === 400 && isAnthropicError(e.error) && /max_tokens/.test(e.error.error.message));
    await assert.rejects(demo.client.messages.create({ model, max_tokens: 4, messages: [] }),
      (e) => e.status === 400 && e.error.error.type === 'invalid_request_error');
    const misplaced = await postJson(`${demo.srv.url}/v1/messages`, {
      model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] }],
    });
    assert.equal(misplaced.status, 400);
    assert.ok(isAnthropicError(misplaced.json));
    assert.match(misplaced.json.error.message, /messages\[0\]\.content\[0\]/);
    await assert.rejects(demo.client.messages.create({ model: 'no-such-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e.status === 404 && e.error.error.type === 'not_found_error');
    const ok = await demo.client.messages.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(ok.type, 'message');
  });
});

describe('anthropic messages with replayed output', () => {
  test('thinking and text blocks (non-stream)', async () => {
    const m = await thinking.client.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual(m.content, [{ type: 'thinking', thinking: 'plan', signature: '' }, { type: 'text', text: 'Hello' }]);
    assert.equal(m.stop_reason, 'end_turn');
  });

  test('thinking and text blocks through the stream helper', async () => {
    const stream = thinking.client.messages.stream({ model, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    stream.on('text', (t) => { text += t; });
    const types = [];
    for await (const ev of stream) types.push(ev.type === 'content_block_delta' ? ev.delta.type : ev.type);
    const final = await stream.finalMessage();
    assert.equal(text, 'Hello');
    assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'text']);
    assert.equal(final.content[0].thinking, 'plan');
    assert.ok(types.includes('thinking_delta') && types.includes('text_delta'));
  });

  test('tool_use block, streamed, then the tool_result round trip', async () => {
    const params = { model, max_tokens: 64, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }] };
    const stream = tooling.client.messages.stream(params);
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content.map((b) => b.type), ['text', 'tool_use']);
    const use = final.content[1];
    assert.match(use.id, /^toolu_/);
    assert.equal(use.name, 'get_weather');
    assert.deepEqual(use.input, { city: 'Paris' });
    const next = await tooling.client.messages.create({
      ...params,
      messages: [...params.messages, { role: 'assistant', content: final.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }],
    });
    assert.deepEqual(next.content, [{ type: 'text', text: 'It is sunny.' }]);
    assert.equal(next.stop_reason, 'end_turn');
  });

  test('stop_sequences end the message with stop_reason stop_sequence', async () => {
    const m = await stopper.client.messages.create({ model, max_tokens: 64, stop_sequences: ['STOP'], messages: [{ role: 'user', content: 'go' }] });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, 'STOP');
    assert.equal(m.content[0].text, 'alpha beta ');
    const final = await stopper.client.messages.stream({ model, max_tokens: 64, stop_sequences: ['STOP'], messages: [{ role: 'user', content: 'go' }] }).finalMessage();
    assert.equal(final.stop_reason, 'stop_sequence');
    assert.equal(final.stop_sequence, 'STOP');
  });
});
