// Tool-call and reasoning wire formats through the official `openai` client against `bunsen serve
// --replay` (the real tokenizer, template, output parsers and dialect code; the model's output replayed
// from fixed Qwen3 texts): reasoning_content separated from content (stream and non-stream), a single and
// parallel tool calls with finish_reason tool_calls (also via the client's stream helper that assembles
// tool calls from deltas), and the assistant tool_calls + tool result round trip.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

const kReasoning = '<think>\nplan</think>\n\nHello';
const kToolCall = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const kTwoCalls = kToolCall + '\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>';

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } },
];
const messages = [{ role: 'user', content: 'Weather in Paris and the time in CET?' }];

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-replay-'));
const servers = {};

// One server per script, so every request to it replays the same text.
async function replayServer(name, text) {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify({ texts: [text] }));
  const srv = await startServer(['--device', 'cpu', '--replay', file]);
  servers[name] = srv;
  return new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}

let reasoning, oneCall, twoCalls;
before(async () => {
  [reasoning, oneCall, twoCalls] = await Promise.all([
    replayServer('reasoning', kReasoning), replayServer('one', kToolCall), replayServer('two', kTwoCalls)]);
});
after(async () => {
  await Promise.all(Object.values(servers).map((s) => s.stop()));
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('replayed model output through the openai client', () => {
  test('reasoning_content is separate from content (non-stream)', async () => {
    const r = await reasoning.chat.completions.create({ messages });
    assert.equal(r.choices[0].message.content, 'Hello');
    assert.equal(r.choices[0].message.reasoning_content, 'plan');
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  test('reasoning_content deltas (stream)', async () => {
    const stream = await reasoning.chat.completions.create({ messages, stream: true });
    let content = '';
    let thought = '';
    for await (const c of stream) {
      content += c.choices[0]?.delta?.content ?? '';
      thought += c.choices[0]?.delta?.reasoning_content ?? '';
    }
    assert.equal(content, 'Hello');
    assert.equal(thought, 'plan');
  });

  test('one tool call, non-stream', async () => {
    const r = await oneCall.chat.completions.create({ messages, tools });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  });

  test('parallel tool calls assembled by the client stream helper', async () => {
    const stream = twoCalls.chat.completions.stream({ messages, tools });
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.deepEqual(c.message.tool_calls.map((t) => t.function.name), ['get_weather', 'get_time']);
    assert.deepEqual(c.message.tool_calls.map((t) => JSON.parse(t.function.arguments)), [{ city: 'Paris' }, { zone: 'CET' }]);
    assert.notEqual(c.message.tool_calls[0].id, c.message.tool_calls[1].id);
  });

  test('tool_choice none leaves the markup as text', async () => {
    const r = await oneCall.chat.completions.create({ messages, tools, tool_choice: 'none' });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.match(r.choices[0].message.content, /get_weather/);
  });

  test('assistant tool_calls + tool results round trip', async () => {
    const first = await twoCalls.chat.completions.create({ messages, tools });
    const msg = first.choices[0].message;
    const followUp = [...messages, msg,
      ...msg.tool_calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: t.function.name === 'get_weather' ? 'sunny' : '10:00' }))];
    const r = await reasoning.chat.completions.create({ messages: followUp, tools });
    assert.equal(r.choices[0].message.content, 'Hello');
    assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens);
  });
});
