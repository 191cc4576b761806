// `bunsen serve` flags against the real binary: the listening line and startup card, a busy port refused
// with a one-line error, --model resolution as mlx-bun does it (directory with config.json, HF-cache
// snapshot shown as org/name, --model > positional > --query, a path without weights fails in one line),
// and graceful SIGTERM shutdown.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, runServeExpectingExit, getJson } from './harness.mjs';

const oneLine = (s) => s.trim().split('\n').filter((l) => l.trim() !== '');

describe('bunsen serve', () => {
  let srv;
  let demoDir;
  let tmp;
  before(async () => {
    srv = await startServer(['--device', 'cpu', '--ctx', '1024']);
    demoDir = (await getJson(`${srv.url}/stats`)).json.model.dir;
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bunsen-serve-'));
  });
  after(async () => {
    await srv?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  // A copy of the demo model made of symlinks, at `dir`.
  function linkModel(dir) {
    fs.mkdirSync(dir, { recursive: true });
    for (const f of fs.readdirSync(demoDir)) fs.symlinkSync(path.join(demoDir, f), path.join(dir, f));
  }

  test('prints the listening line on stdout and a startup card on stderr', () => {
    assert.match(srv.stdout, /^listening on http:\/\/127\.0\.0\.1:\d+$/m);
    assert.ok(srv.port > 0);
    assert.match(srv.stderr, /model\s+\S+/);
    assert.match(srv.stderr, /device\s+cpu/);
    assert.match(srv.stderr, /kv pool\s+.*blocks/);
    assert.match(srv.stderr, /url\s+http:\/\/127\.0\.0\.1:\d+/);
  });

  test('a port that is already serving is refused with a one-line error', async () => {
    const r = await runServeExpectingExit(['--device', 'cpu', '--port', String(srv.port)]);
    assert.notEqual(r.code, 0);
    assert.doesNotMatch(r.stdout, /listening on/);
    const errLines = oneLine(r.stderr).filter((l) => /error/i.test(l));
    assert.equal(errLines.length, 1, r.stderr);
    assert.match(errLines[0], new RegExp(`${srv.port}`));
    // The first server still answers.
    assert.equal((await getJson(`${srv.url}/health`)).status, 200);
  });

  test('a path without weights fails with a one-line error', async () => {
    const dir = path.join(tmp, 'no-weights');
    fs.mkdirSync(dir);
    fs.copyFileSync(path.join(demoDir, 'config.json'), path.join(dir, 'config.json'));
    const r = await runServeExpectingExit(['--device', 'cpu', '--port', '0', '--model', dir]);
    assert.notEqual(r.code, 0);
    const lines = oneLine(r.stderr);
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /weights/);
  });

  test('a missing path fails with a one-line error', async () => {
    const r = await runServeExpectingExit(['--device', 'cpu', '--port', '0', '--model', path.join(tmp, 'nope')]);
    assert.notEqual(r.code, 0);
    assert.equal(oneLine(r.stderr).length, 1, r.stderr);
    assert.match(r.stderr, /no such directory/);
  });

  test('an unknown query fails with a one-line error', async () => {
    const r = await runServeExpectingExit(['--device', 'cpu', '--port', '0', '--query', 'no-such-model-xyz'],
      { env: { HF_HUB_CACHE: path.join(tmp, 'empty-cache'), HF_HOME: tmp, HOME: tmp } });
    assert.notEqual(r.code, 0);
    assert.equal(oneLine(r.stderr).length, 1, r.stderr);
    assert.match(r.stderr, /no local model matches/);
  });

  test('an HF-cache snapshot path is shown as org/name; a query finds it; --model wins over positional', async () => {
    const cache = path.join(tmp, 'hub');
    const snap = path.join(cache, 'models--acme--tiny-chat', 'snapshots', '0123abcd');
    linkModel(snap);
    fs.mkdirSync(path.join(cache, 'models--acme--tiny-chat', 'refs'), { recursive: true });
    fs.writeFileSync(path.join(cache, 'models--acme--tiny-chat', 'refs', 'main'), '0123abcd');
    const plain = path.join(tmp, 'plain-model');
    linkModel(plain);
    const env = { HF_HUB_CACHE: cache };

    const a = await startServer(['--device', 'cpu', '--ctx', '512', '--model', snap], { env });
    try {
      const s = (await getJson(`${a.url}/stats`)).json;
      assert.equal(s.model.id, 'acme/tiny-chat');
      assert.equal(s.model.dir, snap);
    } finally { await a.stop(); }

    const b = await startServer(['--device', 'cpu', '--ctx', '512', '--query', 'tiny-chat'], { env });
    try {
      const s = (await getJson(`${b.url}/stats`)).json;
      assert.equal(s.model.id, 'acme/tiny-chat');
    } finally { await b.stop(); }

    // --model > positional > --query
    const c = await startServer(['--device', 'cpu', '--ctx', '512', plain, '--model', snap, '--query', 'nothing'], { env });
    try {
      assert.equal((await getJson(`${c.url}/stats`)).json.model.id, 'acme/tiny-chat');
    } finally { await c.stop(); }
    const d = await startServer(['--device', 'cpu', '--ctx', '512', plain, '--query', 'tiny-chat'], { env });
    try {
      const s = (await getJson(`${d.url}/stats`)).json;
      assert.equal(s.model.id, 'plain-model');
      assert.equal(s.model.dir, plain);
    } finally { await d.stop(); }
  });

  test('bad flag values fail fast with a one-line error', async () => {
    for (const args of [['--port', '70000'], ['--max-body', '12XB'], ['--thinking', 'maybe'], ['--batch', '0'],
      ['--log-level', 'loud'], ['--device', 'tpu']]) {
      const r = await runServeExpectingExit(['--port', '0', ...args]);
      assert.notEqual(r.code, 0, args.join(' '));
      assert.equal(oneLine(r.stderr).length, 1, `${args.join(' ')}: ${r.stderr}`);
    }
  });

  test('SIGTERM stops the server gracefully (exit code 0)', async () => {
    const s = await startServer(['--device', 'cpu', '--ctx', '512']);
    const { code, signal } = await s.stop();
    assert.equal(signal, null);
    assert.equal(code, 0);
    assert.match(s.stderr, /stopped/);
  });
});
