// SSD tier of the prefix cache end to end on the real `bunsen serve` (built-in demo model, CPU): a long
// prompt, stop the server, start it again with the same --ssd-cache directory: the same request must report
// cached_tokens >= the prompt rounded down to a block minus one block, and produce exactly the first
// answer (computed without any cache hit). /stats and /metrics show the tier. Fault cases: a server killed
// with SIGKILL while snapshots are being written, plus a leftover temp file and a truncated snapshot, must
// leave a directory the next server starts on and answers correctly from (damaged files quarantined).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, getJson, waitForSsdWrites } from './harness.mjs';

const kBlock = 16;
const system = 'You are a careful assistant. ' +
  Array.from({ length: 14 }, (_, i) => `Rule ${i + 1}: answer briefly, cite nothing, and stay on topic.`).join(' ');
const messages = [{ role: 'system', content: system }, { role: 'user', content: 'Name three colors of the rainbow.' }];

const chat = (url, msgs = messages, extra = {}) =>
  postJson(`${url}/v1/chat/completions`, { messages: msgs, max_tokens: 10, temperature: 0, ...extra });

const snapshots = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.kvs'));
const quarantined = (dir) => (fs.existsSync(path.join(dir, 'quarantine')) ? fs.readdirSync(path.join(dir, 'quarantine')) : []);

const serverArgs = (dir, more = []) => ['--device', 'cpu', '--ctx', '2048', '--batch', '2', '--ssd-cache', dir, ...more];

describe('prefix cache (SSD tier)', () => {
  const dirs = [];
  const mkdir = () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-ssd-test-'));
    dirs.push(d);
    return d;
  };
  let servers = [];
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  test('a long prompt hits from SSD after a restart and answers the same', async () => {
    const dir = mkdir();
    const a = await startServer(serverArgs(dir));
    servers.push(a);
    const s0 = (await getJson(`${a.url}/stats`)).json;
    assert.equal(s0.kv.block_size, kBlock);
    assert.equal(s0.ssd.enabled, true, JSON.stringify(s0.ssd));
    const first = await chat(a.url);
    assert.equal(first.status, 200, first.text);
    const p = first.json.usage.prompt_tokens;
    assert.ok(p >= 6 * kBlock, `the prompt spans several blocks (${p} tokens)`);
    assert.equal(first.json.usage.prompt_tokens_details.cached_tokens, 0);
    await waitForSsdWrites(a.url, 1);
    await a.stop();
    assert.ok(snapshots(dir).length >= 1, 'snapshot files on disk');

    const b = await startServer(serverArgs(dir));
    servers.push(b);
    const sb = (await getJson(`${b.url}/stats`)).json.ssd;
    assert.ok(sb.entries >= 1 && sb.bytes > 0, JSON.stringify(sb));
    const again = await chat(b.url);
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.usage.prompt_tokens, p);
    const hit = again.json.usage.prompt_tokens_details.cached_tokens;
    const bound = Math.floor(p / kBlock) * kBlock - kBlock;
    assert.ok(hit >= bound, `cached_tokens ${hit} >= ${bound} (prompt ${p} tokens)`);
    assert.ok(hit < p);
    assert.equal(again.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(again.json.choices[0].finish_reason, first.json.choices[0].finish_reason);

    const s = (await getJson(`${b.url}/stats`)).json.ssd;
    assert.equal(s.enabled, true);
    assert.ok(s.hits >= 1, JSON.stringify(s));
    assert.equal(s.quarantined, 0, JSON.stringify(s));
    // The restore ran as a job: its bytes and seconds are counted (the benchmark's GB/s), none is in flight.
    assert.ok(s.restored_bytes > 0, JSON.stringify(s));
    assert.ok(s.restore_s > 0, JSON.stringify(s));
    assert.equal(s.restores_pending, 0, JSON.stringify(s));
    const metrics = await (await fetch(`${b.url}/metrics`)).text();
    const m = metrics.match(/^bunsen_ssd_cache_hits_total (\d+)$/m);
    assert.ok(m && Number(m[1]) >= 1, 'ssd hits counter');
    assert.match(metrics, /^# TYPE bunsen_ssd_cache_writes_total counter$/m);
    assert.match(metrics, /^bunsen_ssd_cache_entries \d+$/m);
    const rb = metrics.match(/^bunsen_ssd_cache_restored_bytes_total (\d+)$/m);
    assert.ok(rb && Number(rb[1]) === s.restored_bytes, 'restored bytes counter');
    assert.match(metrics, /^# TYPE bunsen_ssd_cache_restore_seconds_total counter$/m);
    assert.match(metrics, /^bunsen_ssd_cache_restores_pending 0$/m);
    await b.stop();
  });

  test('kill -9 while writing, a stale temp file and a truncated snapshot: the server starts and answers right', async () => {
    const dir = mkdir();
    // The reference answer, from a server without any cache.
    const plain = await startServer(['--device', 'cpu', '--ctx', '2048', '--batch', '2', '--prompt-cache', '0']);
    servers.push(plain);
    const ref = await chat(plain.url);
    assert.equal(ref.status, 200, ref.text);
    await plain.stop();

    const a = await startServer(serverArgs(dir));
    servers.push(a);
    const warm = await chat(a.url);
    assert.equal(warm.status, 200, warm.text);
    await waitForSsdWrites(a.url, 1);
    // Several different prompts finish at about the same time; SIGKILL lands while their snapshots queue
    // and get written.
    const variants = Array.from({ length: 4 }, (_, i) => [
      { role: 'system', content: system + ` Variant ${i}.` }, { role: 'user', content: `Count to ${i + 3}.` }]);
    await Promise.all(variants.map((v) => chat(a.url, v, { max_tokens: 2 })));
    a.proc.kill('SIGKILL');
    await a.exited;

    // A stale temp file (a write cut short) and a truncated copy of a good snapshot.
    fs.writeFileSync(path.join(dir, '.tmp-99999-1-deadbeef.kvs'), Buffer.alloc(5000, 7));
    const good = snapshots(dir);
    assert.ok(good.length >= 1);
    const src = path.join(dir, good[0]);
    const size = fs.statSync(src).size;
    const truncated = path.join(dir, `${'0'.repeat(16)}-${'1'.repeat(16)}.kvs`);
    fs.writeFileSync(truncated, fs.readFileSync(src).subarray(0, Math.floor(size / 2)));

    const b = await startServer(serverArgs(dir, ['--ssd-cache-verify']));
    servers.push(b);
    const again = await chat(b.url);
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.choices[0].message.content, ref.json.choices[0].message.content);
    const p = again.json.usage.prompt_tokens;
    assert.ok(again.json.usage.prompt_tokens_details.cached_tokens >= Math.floor(p / kBlock) * kBlock - kBlock,
      JSON.stringify(again.json.usage));
    assert.ok(!fs.existsSync(path.join(dir, '.tmp-99999-1-deadbeef.kvs')), 'stale temp file removed');
    assert.ok(!fs.existsSync(truncated), 'truncated snapshot moved away');
    assert.ok(quarantined(dir).length >= 1, 'truncated snapshot quarantined');
    const s = (await getJson(`${b.url}/stats`)).json.ssd;
    assert.ok(s.quarantined >= 1, JSON.stringify(s));
    await b.stop();
  });

  test('the namespace holds the weights and tokenizer: a copy hits, a changed weight or tokenizer misses', async () => {
    const demo = path.join(process.env.BUNSEN_CACHE, 'models', 'demo-qwen3-tiny');
    assert.ok(fs.existsSync(path.join(demo, 'model.safetensors')), `demo model at ${demo}`);
    const copy = (name) => {
      const d = path.join(mkdir(), name);
      fs.cpSync(demo, d, { recursive: true });
      return d;
    };
    const same = copy('same');
    const poked = copy('poked');  // one weight byte differs: the first byte of the tensor data
    const st = path.join(poked, 'model.safetensors');
    const bytes = fs.readFileSync(st);
    const at = 8 + Number(bytes.readBigUInt64LE(0));
    bytes[at] ^= 1;
    fs.writeFileSync(st, bytes);
    const retok = copy('retok');  // same weights, a tokenizer_config.json that differs by one space
    const tc = path.join(retok, 'tokenizer_config.json');
    fs.writeFileSync(tc, fs.readFileSync(tc, 'utf8') + ' ');

    const dir = mkdir();
    const a = await startServer(serverArgs(dir, ['--model', demo]));
    servers.push(a);
    const first = await chat(a.url);
    assert.equal(first.status, 200, first.text);
    await waitForSsdWrites(a.url, 1);
    await a.stop();
    const p = first.json.usage.prompt_tokens;
    for (const [model, hits] of [[poked, false], [retok, false], [same, true]]) {
      const b = await startServer(serverArgs(dir, ['--model', model]));
      servers.push(b);
      const r = await chat(b.url);
      assert.equal(r.status, 200, r.text);
      const cached = r.json.usage.prompt_tokens_details.cached_tokens;
      if (hits) assert.ok(cached >= Math.floor(p / kBlock) * kBlock - kBlock, `${model}: cached ${cached}`);
      else assert.equal(cached, 0, `${model} must not reuse the other model's blocks`);
      await b.stop();
    }
  });

  test('--help documents the SSD flags', async () => {
    const { spawnSync } = await import('node:child_process');
    const { bunsenExe } = await import('./harness.mjs');
    const r = spawnSync(bunsenExe, ['serve', '--help'], { encoding: 'utf8' });
    const out = r.stdout + r.stderr;
    assert.match(out, /--ssd-cache\b/);
    assert.match(out, /--ssd-cache-max/);
    assert.match(out, /--ssd-cache-verify/);
  });
});
