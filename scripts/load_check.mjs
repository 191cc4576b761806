#!/usr/bin/env node
// Load check for `bunsen serve` (issue 5; a script, not a unit test: it takes tens of seconds and opens
// ~1,500 sockets). Phase 1: N concurrent connections (default 500), half streaming chat completions and
// half non-streaming, each on its own TCP connection; every one must complete. Phase 2: M slow-header
// sockets (default 1,000) dribble a request head one header at a time; while they are held a normal
// client must still be served within 1 s (health and a chat completion). Prints a summary; exit code 1
// when a check fails.
// Usage: node scripts/load_check.mjs [--url http://127.0.0.1:8080] [--connections 500] [--slow 1000]
//        [--max-tokens 8] [-- extra `bunsen serve` args when no --url is given]
// Without --url it starts build/bunsen (or $BUNSEN_EXE) on the demo model through tests/server/harness.mjs.
import http from 'node:http';
import net from 'node:net';
import { startServer } from '../tests/server/harness.mjs';

function parseArgs(argv) {
  const o = { url: null, connections: 500, slow: 1000, maxTokens: 8, serveArgs: [] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === '--') { o.serveArgs = argv.slice(i + 1); break; }
    const v = argv[i + 1];
    if (a === '--url') o.url = v, ++i;
    else if (a === '--connections') o.connections = Number(v), ++i;
    else if (a === '--slow') o.slow = Number(v), ++i;
    else if (a === '--max-tokens') o.maxTokens = Number(v), ++i;
    else throw new Error(`unknown argument ${a}`);
  }
  return o;
}

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

// One chat completion over a fresh connection: resolves {ok, ms, ttfbMs, status, detail}.
function chat(url, { stream, maxTokens, index }) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const body = JSON.stringify({
      messages: [{ role: 'user', content: `load check request ${index}` }],
      max_tokens: maxTokens, temperature: 0, stream,
    });
    const req = http.request(`${url}/v1/chat/completions`, {
      method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      const ttfbMs = performance.now() - t0;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        const ms = performance.now() - t0;
        let ok = res.statusCode === 200;
        if (ok && stream) ok = text.includes('data: [DONE]');
        if (ok && !stream) {
          try { ok = JSON.parse(text).object === 'chat.completion'; } catch { ok = false; }
        }
        resolve({ ok, ms, ttfbMs, status: res.statusCode, detail: ok ? '' : text.slice(0, 200) });
      });
      res.on('error', (e) => resolve({ ok: false, ms: performance.now() - t0, status: res.statusCode, detail: String(e) }));
    });
    req.on('error', (e) => resolve({ ok: false, ms: performance.now() - t0, status: 0, detail: String(e) }));
    req.end(body);
  });
}

function get(url) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    http.get(url, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ ok: res.statusCode === 200, ms: performance.now() - t0, status: res.statusCode }));
    }).on('error', (e) => resolve({ ok: false, ms: performance.now() - t0, status: 0, detail: String(e) }));
  });
}

const pct = (xs, p) => {
  if (!xs.length) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

async function phaseConcurrent(url, n, maxTokens) {
  const t0 = performance.now();
  const jobs = Array.from({ length: n }, (_, i) => chat(url, { stream: i % 2 === 0, maxTokens, index: i }));
  const results = await Promise.all(jobs);
  const wall = performance.now() - t0;
  const failed = results.filter((r) => !r.ok);
  const ms = results.map((r) => r.ms);
  console.log(`phase 1: ${n} concurrent connections (${Math.ceil(n / 2)} streaming), max_tokens ${maxTokens}`);
  console.log(`  completed ${n - failed.length}/${n} in ${(wall / 1000).toFixed(2)} s; latency p50 ${pct(ms, 0.5).toFixed(0)} ms, ` +
    `p99 ${pct(ms, 0.99).toFixed(0)} ms, max ${Math.max(...ms).toFixed(0)} ms`);
  for (const f of failed.slice(0, 5)) console.log(`  FAILED: status ${f.status} ${f.detail}`);
  return failed.length === 0;
}

// Opens `m` sockets that send a request head one header line every `everyMs`, never finishing it.
async function openSlowSockets(port, m, everyMs) {
  const socks = [];
  let closedEarly = 0;
  for (let i = 0; i < m; ++i) {
    const s = net.connect({ port, host: '127.0.0.1' });
    s.on('error', () => {});
    s.on('close', () => { closedEarly += 1; });
    s.on('connect', () => s.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n'));
    socks.push(s);
    if (i % 100 === 99) await new Promise((r) => setTimeout(r, 10));  // do not overflow the listen backlog
  }
  let n = 0;
  const timer = setInterval(() => {
    for (const s of socks) if (!s.destroyed) s.write(`X-Slow-${n}: x\r\n`);
    n += 1;
  }, everyMs);
  return { socks, stop() { clearInterval(timer); for (const s of socks) s.destroy(); }, closedEarly: () => closedEarly };
}

async function phaseSlow(url, port, m, maxTokens) {
  const slow = await openSlowSockets(port, m, 1000);
  await new Promise((r) => setTimeout(r, 1500));  // let every slow socket get accepted and start dribbling
  const samples = [];
  let ok = true;
  for (let i = 0; i < 3; ++i) {
    const h = await get(`${url}/health`);
    const c = await chat(url, { stream: false, maxTokens, index: i });
    samples.push(h.ms, c.ms);
    ok = ok && h.ok && c.ok && h.ms < 1000 && c.ms < 1000;
    await new Promise((r) => setTimeout(r, 1000));
  }
  const earlyClosed = slow.closedEarly();
  slow.stop();
  console.log(`phase 2: ${m} slow-header sockets held open`);
  console.log(`  normal client while they dribble: max ${Math.max(...samples).toFixed(1)} ms over ${samples.length} requests ` +
    `(health + chat completion); ${earlyClosed} slow sockets closed by the server so far`);
  if (!ok) console.log('  FAILED: a normal request took >= 1 s or failed');
  return ok;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  let srv = null;
  let url = o.url;
  if (!url) {
    srv = await startServer(['--device', 'cpu', ...o.serveArgs]);
    url = srv.url;
    console.log(`started ${url}`);
  }
  const port = Number(new URL(url).port);
  let ok = false;
  try {
    const p1 = await phaseConcurrent(url, o.connections, o.maxTokens);
    const p2 = await phaseSlow(url, port, o.slow, o.maxTokens);
    const after = await get(`${url}/health`);
    console.log(`after: /health ${after.status} in ${after.ms.toFixed(1)} ms`);
    ok = p1 && p2 && after.ok;
  } finally {
    if (srv) await srv.stop();
  }
  console.log(ok ? 'load check: PASS' : 'load check: FAIL');
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
