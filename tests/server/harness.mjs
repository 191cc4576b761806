// Test harness for the black-box server tests: starts the real `bunsen serve` binary on an ephemeral
// loopback port and hands back its URL. Not a mock: every test talks HTTP to the real process.
// Invariants: startServer() resolves only after the server printed `listening on http://HOST:PORT`;
// stop() sends SIGTERM and resolves once the process exited (SIGKILL after a grace period); a server that
// exits or stays silent for 60 s rejects with its captured stderr in the message.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const bunsenExe = process.env.BUNSEN_EXE || path.join(repoRoot, 'build', 'bunsen');

const kStartTimeoutMs = 60_000;
const kStopGraceMs = 10_000;

// Every server started by this process, so a crashed test does not leave one behind.
const live = new Set();
process.on('exit', () => {
  for (const proc of live) proc.kill('SIGKILL');
});

export async function startServer(args = [], { env = {}, timeoutMs = kStartTimeoutMs } = {}) {
  const proc = spawn(bunsenExe, ['serve', '--port', '0', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  let stderr = '';
  let stdout = '';
  proc.stderr.setEncoding('utf8');
  proc.stdout.setEncoding('utf8');
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = once(proc, 'exit').then(([code, signal]) => {
    live.delete(proc);
    return { code, signal };
  });

  const listening = new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`bunsen serve did not print 'listening on' within ${timeoutMs} ms\nstderr:\n${stderr}`));
    }, timeoutMs);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/^listening on (http:\/\/(\S+):(\d+))$/m);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1], host: m[2], port: Number(m[3]) });
      }
    });
    proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`bunsen serve exited (code ${code}, signal ${signal}) before listening\nstderr:\n${stderr}`));
    });
  });

  const where = await listening;
  const server = {
    ...where,
    proc,
    get stderr() { return stderr; },
    get stdout() { return stdout; },
    exited,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), kStopGraceMs);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
  return server;
}

// Runs `bunsen serve ...args` expecting it to fail at startup: resolves {code, stderr, stdout}.
export async function runServeExpectingExit(args, { env = {}, timeoutMs = kStartTimeoutMs } = {}) {
  const proc = spawn(bunsenExe, ['serve', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  let stderr = '';
  let stdout = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  proc.stdout.on('data', (d) => { stdout += d; });
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const [code, signal] = await once(proc, 'exit');
  clearTimeout(timer);
  live.delete(proc);
  return { code, signal, stderr, stdout };
}

// One raw HTTP/1.1 exchange over a fresh socket: writes `bytes` (string or Buffer; more chunks may be
// given as an array with optional delays) and resolves with the raw response text once the server closes
// the connection or `timeoutMs` passes ({text, status, headers, body, timedOut, ms}).
export function rawRequest(port, bytes, { timeoutMs = 10_000, host = '127.0.0.1', endWrite = false } = {}) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const sock = net.connect({ port, host });
    const chunks = [];
    let done = false;
    const finish = (timedOut) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ ...parseResponse(Buffer.concat(chunks).toString('utf8')), timedOut, ms: performance.now() - started });
    };
    const timer = setTimeout(() => finish(true), timeoutMs);
    sock.on('data', (d) => {
      chunks.push(d);
      // One full response with a Content-Length is enough: do not wait for the close.
      const parsed = parseResponse(Buffer.concat(chunks).toString('utf8'));
      if (parsed.complete) finish(false);
    });
    sock.on('end', () => finish(false));
    sock.on('close', () => finish(false));
    sock.on('error', (e) => (chunks.length ? finish(false) : reject(e)));
    sock.on('connect', async () => {
      const parts = Array.isArray(bytes) ? bytes : [bytes];
      for (const p of parts) {
        if (typeof p === 'number') await new Promise((r) => setTimeout(r, p));
        else if (!sock.destroyed) sock.write(p);
      }
      if (endWrite) sock.end();
    });
  });
}

// Splits a raw HTTP response into status, lower-cased headers and body (Content-Length framing only).
export function parseResponse(text) {
  const headEnd = text.indexOf('\r\n\r\n');
  if (headEnd < 0) return { text, status: 0, headers: {}, body: '', complete: false };
  const lines = text.slice(0, headEnd).split('\r\n');
  const status = Number((lines[0].match(/^HTTP\/1\.[01] (\d{3})/) || [])[1] || 0);
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const body = text.slice(headEnd + 4);
  const len = headers['content-length'] !== undefined ? Number(headers['content-length']) : undefined;
  const complete = len !== undefined && Buffer.byteLength(body) >= len;
  return { text, status, headers, body, complete };
}

// POSTs JSON with fetch; resolves {status, headers, json, text, ms}.
export async function postJson(url, body, { headers = {}, signal } = {}) {
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, json, text, ms: performance.now() - started };
}

// GETs a path; resolves {status, headers, json, text, ms}.
export async function getJson(url, { headers = {} } = {}) {
  const started = performance.now();
  const res = await fetch(url, { headers });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, json, text, ms: performance.now() - started };
}

// Asserts-free helper: true when `obj` has OpenAI's error shape {error:{message,type,param,code}}.
// Polls /stats until the SSD tier has written at least n snapshots (they are written asynchronously after
// a request settles); resolves with /stats' ssd object, rejects after timeoutMs.
export async function waitForSsdWrites(url, n, timeoutMs = 20_000) {
  const t0 = Date.now();
  for (;;) {
    const s = (await getJson(`${url}/stats`)).json.ssd;
    if (s.writes >= n) return s;
    if (Date.now() - t0 > timeoutMs) throw new Error(`ssd writes stayed at ${s.writes} (< ${n}): ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function isOpenAIError(obj) {
  return !!obj && typeof obj.error === 'object' && typeof obj.error.message === 'string' &&
    typeof obj.error.type === 'string' && 'param' in obj.error && 'code' in obj.error;
}

// True when `obj` has Anthropic's error shape {type:"error", error:{type,message}}.
export function isAnthropicError(obj) {
  return !!obj && obj.type === 'error' && typeof obj.error === 'object' &&
    typeof obj.error.type === 'string' && typeof obj.error.message === 'string';
}
