// The OpenAI Responses API through the official `openai` client against the real `bunsen serve`: the demo
// model (real generation: response shape, usage, incomplete at max_output_tokens, the stream helper) and
// `--replay` servers with fixed Qwen3 output (reasoning + message items, function calls and the
// function_call_output round trip, previous_response_id chains), plus 4xx errors in OpenAI's shape.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, isOpenAIError, postJson } from './harness.mjs';

const kReasoning = '<think>\nplan</think>\n\nHello';
const kToolCall = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const tools = [{
  type: 'function', name: 'get_weather', description: 'Weather of a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const model = 'default';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-responses-'));
const servers = [];

async function server(args) {
  const srv = await startServer(['--device', 'cpu', ...args]);
  servers.push(srv);
  return { srv, client: new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

async function replay(name, texts) {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify({ texts }));
  return server(['--replay', file]);
}

let demo, thinking, tooling;
before(async () => {
  [demo, thinking, tooling] = await Promise.all([
    server(['--temperature', '0']),
    replay('thinking', [kReasoning]),
    replay('tool', [kToolCall, 'It is sunny.']),
  ]);
});
after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('responses on the demo model', () => {
  test('response shape and usage', async () => {
    const r = await demo.client.responses.create({ model, input: 'Hello', max_output_tokens: 6, instructions: 'Be brief.' });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    if (r.status === 'incomplete') assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.instructions, 'Be brief.');
    assert.ok(r.usage.input_tokens > 0);
    assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 6);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(typeof r.output_text, 'string');
  });

  test('stream helper: sequence numbers and finalResponse', async () => {
    const stream = demo.client.responses.stream({ model, input: 'Hi', max_output_tokens: 6 });
    const events = [];
    for await (const ev of stream) events.push(ev);
    const final = await stream.finalResponse();
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    assert.equal(events[0].type, 'response.created');
    assert.equal(events[1].type, 'response.in_progress');
    assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type));
    assert.equal(final.id, events[0].response.id);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(final.output_text, deltas);
  });

  test('bad input gets OpenAI-shaped errors and the server keeps serving', async () => {
    await assert.rejects(demo.client.responses.create({ model, input: 'x', previous_response_id: 'resp_missing' }),
      (e) => e.status === 404 && e.error.param === 'previous_response_id');
    const image = await postJson(`${demo.srv.url}/v1/responses`, { model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] });
    assert.equal(image.status, 400);
    assert.ok(isOpenAIError(image.json));
    assert.equal(image.json.error.param, 'input[0].content[0].type');
    await assert.rejects(demo.client.responses.create({ model, input: 'x', max_output_tokens: 0 }), (e) => e.status === 400);
    const ok = await demo.client.responses.create({ model, input: 'x', max_output_tokens: 2 });
    assert.equal(ok.object, 'response');
  });
});

describe('responses with replayed output', () => {
  test('reasoning and message items; output_text', async () => {
    const r = await thinking.client.responses.create({ model, input: 'hi' });
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
    assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: 'plan' }]);
    assert.equal(r.output_text, 'Hello');
    assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  });

  test('stream helper assembles reasoning and text', async () => {
    const stream = thinking.client.responses.stream({ model, input: 'hi' });
    const types = [];
    for await (const ev of stream) types.push(ev.type);
    const final = await stream.finalResponse();
    assert.equal(final.output_text, 'Hello');
    assert.equal(final.output[0].content[0].text, 'plan');
    for (const t of ['response.reasoning_text.delta', 'response.reasoning_text.done', 'response.output_text.delta',
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed'])
      assert.ok(types.includes(t), `missing ${t}`);
  });

  test('previous_response_id continues the stored conversation', async () => {
    const first = await thinking.client.responses.create({ model, input: 'first question' });
    const second = await thinking.client.responses.create({ model, input: 'and then?', previous_response_id: first.id });
    assert.equal(second.previous_response_id, first.id);
    // The second prompt holds the first exchange: more input tokens than the first.
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + 3);
    const stream = thinking.client.responses.stream({ model, input: 'and after that?', previous_response_id: second.id });
    const third = await stream.finalResponse();
    assert.ok(third.usage.input_tokens > second.usage.input_tokens);
  });

  test('function_call, then function_call_output via previous_response_id', async () => {
    const first = await tooling.client.responses.create({ model, input: 'Weather in Paris?', tools });
    assert.equal(first.output.length, 1);
    const call = first.output[0];
    assert.equal(call.type, 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    const second = await tooling.client.responses.create({
      model, tools, previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
    });
    assert.equal(second.output_text, 'It is sunny.');
  });

  test('function call arguments through the stream helper', async () => {
    const stream = tooling.client.responses.stream({ model, input: 'Weather in Paris?', tools });
    let args = '';
    stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
    const final = await stream.finalResponse();
    const call = final.output.find((o) => o.type === 'function_call');
    assert.ok(call);
    assert.equal(call.arguments, args);
    assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  });
});
