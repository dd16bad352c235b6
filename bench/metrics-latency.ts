/**
 * Metrics API latency over 30 days of minute data for one account (issue 4): one call a minute
 * for 30 days (43,200 usage events over 5 chains and 6 methods) projected by the real
 * projections, then `GET /api/v1/metrics/user` over 30 days, 7 days, 24 hours and 6 hours,
 * and with a chain filter, through the real HTTP stack (fastify inject). Target p95 ≤ 50 ms.
 *
 *   npx tsx bench/metrics-latency.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { openRuntime } from '../src/runtime.js';
import { buildServer } from '../src/server.js';
import { seedAccounts, seedUsage, type SeededToken } from './lib/eventMix.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const COMMAND = 'npx tsx bench/metrics-latency.ts';
const DAY = 86_400_000;
const MINUTES = 30 * 24 * 60;
const ROUNDS = 40;

async function main(): Promise<void> {
  timeLimit(170);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-metrics-'));
  const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir)));
  try {
    await runtime.projector?.start();
    const now = Date.now();
    const tokens = await seedAccounts(runtime.store, 1, 2, new Date(now - 31 * DAY).toISOString());
    log(`seeding ${MINUTES} usage events over 30 days`);
    await seedUsage(runtime.store, tokens, MINUTES, now - 30 * DAY, 30 * DAY);
    const head = await runtime.store.headPosition();
    if (head) await runtime.projector?.waitFor(head, 150_000);
    const app = await buildServer(runtime);
    await app.ready();
    const auth = { authorization: `Bearer ${(tokens[0] as SeededToken).token}` };
    const iso = (ms: number) => new Date(ms).toISOString();
    const queries: Array<[string, string]> = [
      ['30d', `?start=${iso(now - 30 * DAY)}&end=${iso(now)}`],
      ['30d_chain', `?start=${iso(now - 30 * DAY)}&end=${iso(now)}&chain=eth`],
      ['7d', `?start=${iso(now - 7 * DAY)}&end=${iso(now)}`],
      ['24h', `?start=${iso(now - DAY)}&end=${iso(now)}`],
      ['6h', `?start=${iso(now - DAY / 4)}&end=${iso(now)}`],
    ];
    const all: number[] = [];
    for (const [name, query] of queries) {
      const times: number[] = [];
      for (let i = 0; i < ROUNDS + 3; i++) {
        const started = performance.now();
        const res = await app.inject({ method: 'GET', url: `/api/v1/metrics/user${query}`, headers: auth });
        const ms = performance.now() - started;
        if (res.statusCode !== 200) throw new Error(`${name}: ${res.statusCode} ${res.body}`);
        if (i >= 3) times.push(ms); // the first calls warm the JIT and the LevelDB cache
      }
      times.sort((a, b) => a - b);
      all.push(...times);
      log(`${name}: p50 ${round(times[Math.floor(times.length / 2)] as number)} ms, p95 ${round(times[Math.floor(times.length * 0.95)] as number)} ms`);
    }
    all.sort((a, b) => a - b);
    emit({
      name: 'metrics_api_p95_ms',
      target: '<= 50',
      result: round(all[Math.floor(all.length * 0.95)] as number),
      unit: 'ms',
      command: COMMAND,
      method: `${ROUNDS} calls each of 30 d, 30 d with chain, 7 d, 24 h and 6 h over ${MINUTES} minute-spaced usage events; p50 ${round(all[Math.floor(all.length / 2)] as number)} ms`,
    });
    await app.close();
  } finally {
    await runtime.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runMain(main);
