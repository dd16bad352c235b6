/**
 * Memory of a 1,000,000-row CSV export (target: under 100 MB above the baseline).
 *
 *   node --expose-gc --import tsx bench/export-memory.ts [rows]
 *
 * A child process starts the service on the embedded default in a temporary directory and
 * appends the calls to the account's usage stream as the ingester does, a compact batch event of
 * 1,000 calls an append (`EVENTS=one-call`: an event per call, as logs written before compact
 * batches hold, and as a tenant among thousands gets, each event one call: the raw rows are
 * then a document per call, the export's worst case), and waits for the projections. This
 * process then opens the same data with a fresh heap, serves it, and downloads
 * /api/v1/exports/usage.csv over HTTP on loopback while sampling its RSS and heap. Server and
 * client share the process, so the figure includes both.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../src/domain/usage.js';
import { encodeUsageBatch, USAGE_BATCH_EVENT_TYPE, usageBatchEventId } from '../src/domain/usageBatch.js';
import { openRuntime } from '../src/runtime.js';
import { buildServer } from '../src/server.js';
import { usageEventId } from '../test/support/oneCallUsage.js';
import { emit, round } from './lib/report.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const ONE_CALL_EVENTS = process.env.EVENTS === 'one-call';
const LIMIT_MB = 100;
const MB = 1024 * 1024;
const gc = (globalThis as { gc?: () => void }).gc;

async function start(dataDir: string) {
  const runtime = await openRuntime(loadConfig({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off', ADMIN_TOKEN: 'bench-admin-token-0123456789' }));
  await runtime.projector?.start();
  await runtime.projector?.caughtUp;
  const app = await buildServer(runtime);
  return {
    runtime,
    app,
    close: async () => {
      await app.close();
      await runtime.close();
    },
  };
}

/** Child: an account, a token and ROWS calls over the last 6 days (inside Free's 7); prints the session cookie. */
async function writeRows(dataDir: string): Promise<void> {
  const { runtime, app, close } = await start(dataDir);
  const signup = await app.inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'bench@example.com', password: 'bench password' } });
  const cookie = String(signup.headers['set-cookie']).split(';')[0] as string;
  const accountId = signup.json().id as string;
  const tokenId = (await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: { cookie }, payload: { name: 'bench' } })).json().id as string;
  const started = performance.now();
  const from = Date.now() - 6 * 86_400_000;
  const step = Math.max(1, Math.floor((6 * 86_400_000) / ROWS));
  const wave: Array<Promise<unknown>> = [];
  for (let first = 0; first < ROWS; first += 1000) {
    const records: UsageRecord[] = [];
    for (let i = first; i < Math.min(ROWS, first + 1000); i++) {
      const at = new Date(from + i * step).toISOString();
      const r: UsageRecord = {
        requestId: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
        at,
        accountId,
        tokenId,
        chain: 'eth',
        method: i % 10 === 0 ? 'eth_call' : 'eth_getBalance',
        status: 200,
        rpcErrorCode: i % 100 === 0 ? 3 : null,
        errorMessage: i % 100 === 0 ? 'execution reverted' : null,
        totalMs: 12.34,
        upstreamMs: 10.5,
        clientIp: '203.0.113.45',
        upstream: 'eth-1',
      };
      records.push(r);
    }
    const batch = ONE_CALL_EVENTS
      ? records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }))
      : [{ id: usageBatchEventId(records), type: USAGE_BATCH_EVENT_TYPE, data: { ...encodeUsageBatch(accountId, records, first) } }];
    // A few appends in flight, so the store commits them in groups.
    wave.push(runtime.store.append(usageStream(accountId), batch, 'any'));
    if (wave.length >= 10) await Promise.all(wave.splice(0));
  }
  await Promise.all(wave);
  const head = await runtime.store.headPosition();
  if (head) await runtime.projector?.waitFor(head, 600_000);
  await close();
  console.log(JSON.stringify({ cookie, writeSeconds: (performance.now() - started) / 1000 }));
}

async function measureExport(dataDir: string, cookie: string): Promise<void> {
  const { app, close } = await start(dataDir);
  try {
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    gc?.();
    const base = process.memoryUsage();
    let peakRss = base.rss;
    let peakHeap = base.heapUsed;
    const sampler = setInterval(() => {
      const m = process.memoryUsage();
      peakRss = Math.max(peakRss, m.rss);
      peakHeap = Math.max(peakHeap, m.heapUsed);
    }, 10);
    const started = performance.now();
    let firstByteMs = 0;
    let bytes = 0;
    let lines = 0;
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/api/v1/exports/usage.csv', headers: { cookie } }, (res) => {
        res.on('data', (chunk: Buffer) => {
          if (bytes === 0) firstByteMs = performance.now() - started;
          bytes += chunk.length;
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
        });
        res.on('end', resolve);
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end();
    });
    clearInterval(sampler);
    const seconds = (performance.now() - started) / 1000;
    const rssGrowth = (peakRss - base.rss) / MB;
    console.log(`CSV received          ${(lines - 1).toLocaleString('en-US')} rows + header, ${(bytes / MB).toFixed(1)} MB`);
    console.log(
      `first byte after      ${firstByteMs.toFixed(0)} ms; whole export ${seconds.toFixed(1)} s (${Math.round(ROWS / seconds).toLocaleString('en-US')} rows/s)`,
    );
    console.log(`baseline              RSS ${(base.rss / MB).toFixed(1)} MB, heap ${(base.heapUsed / MB).toFixed(1)} MB`);
    console.log(`peak RSS growth       ${rssGrowth.toFixed(1)} MB (limit ${LIMIT_MB} MB)${gc ? '' : '  [run with --expose-gc for a clean baseline]'}`);
    console.log(`peak heap growth      ${((peakHeap - base.heapUsed) / MB).toFixed(1)} MB`);
    emit({
      name: 'export_csv_rss_growth_mb',
      target: `<= ${LIMIT_MB}`,
      result: round(rssGrowth),
      unit: 'MB',
      command: 'node --expose-gc --import tsx bench/export-memory.ts',
      method: `${ROWS} rows of CSV over HTTP (${ONE_CALL_EVENTS ? 'an event per call' : 'batch events of 1,000'}), first byte after ${firstByteMs.toFixed(0)} ms; peak RSS above the baseline, server and client in one process`,
    });
    if (lines - 1 !== ROWS) throw new Error(`expected ${ROWS} rows, got ${lines - 1}`);
    if (rssGrowth > LIMIT_MB) process.exitCode = 1;
  } finally {
    await close();
  }
}

if (process.env.BENCH_EXPORT_DIR) {
  await writeRows(process.env.BENCH_EXPORT_DIR);
} else {
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-bench-export-'));
  try {
    const child = spawnSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), String(ROWS)], {
      env: { ...process.env, BENCH_EXPORT_DIR: dataDir },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (child.status !== 0) throw new Error(`writing rows failed (exit ${child.status})`);
    const { cookie, writeSeconds } = JSON.parse(child.stdout.trim().split('\n').pop() ?? '{}') as { cookie: string; writeSeconds: number };
    console.log(`rows written          ${ROWS.toLocaleString('en-US')} in ${writeSeconds.toFixed(1)} s (separate process)`);
    await measureExport(dataDir, cookie);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}
