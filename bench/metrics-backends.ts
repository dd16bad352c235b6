/**
 * The metrics API on both read-model backends in one run, at 1M stored calls (issue 37): the
 * same usage events (CALLS, default 1,000,000, over the last 30 days, several tokens, 5 chains,
 * 6 methods, ~3 % errors) appended to an embedded runtime (LevelDB, temp dir) and to a
 * PostgreSQL runtime (a database of its own, created and dropped), each event generated once
 * and written to both. Each backend then projects the whole log from its start, one after the
 * other (the runner's catch-up, as a rebuild replays), timed. Then the user metrics and one
 * token's metrics over 24 h, 7 d and 30 d, through the real HTTP stack (fastify inject), the
 * backends interleaved call by call: p50/p95 per backend and PostgreSQL's over LevelDB's.
 *
 *   npx tsx bench/metrics-backends.ts    (CALLS=200000 for a quicker look; PG_BENCH_ADMIN_URL,
 *                                          default postgres://postgres@127.0.0.1:5432/test)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import type { EventStore } from '../src/infra/eventstore/port.js';
import { openRuntime, type Runtime } from '../src/runtime.js';
import { buildServer } from '../src/server.js';
import { seedAccounts, seedUsage, type SeededToken } from './lib/eventMix.js';
import { sql, withBenchDatabase } from './lib/postgres.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const CALLS = Number(process.env.CALLS ?? 1_000_000);
const COMMAND = `${CALLS === 1_000_000 ? '' : `CALLS=${CALLS} `}npx tsx bench/metrics-backends.ts`;
const DAY = 86_400_000;
const TOKENS = 4;
const ROUNDS = 30;
const WARMUP = 3;

/** Writes each append to both stores, so that both logs hold the same events. */
function bothStores(a: EventStore, b: EventStore): EventStore {
  return {
    append: async (streamId, events, expected) => (await Promise.all([a.append(streamId, events, expected), b.append(streamId, events, expected)]))[0],
    readStream: (streamId, options) => a.readStream(streamId, options),
    truncateBefore: async (streamId, revision) => {
      await Promise.all([a.truncateBefore(streamId, revision), b.truncateBefore(streamId, revision)]);
    },
    subscribeToAll: (options) => a.subscribeToAll(options),
    headPosition: () => a.headPosition(),
    close: async () => {},
  };
}

async function project(name: string, runtime: Runtime): Promise<number> {
  const started = performance.now();
  await runtime.projector?.start();
  const head = await runtime.store.headPosition();
  if (head) await runtime.projector?.waitFor(head, 600_000);
  const seconds = (performance.now() - started) / 1000;
  log(`${name}: projected the log in ${round(seconds)} s (${round(CALLS / seconds)} usage events/s)`);
  return seconds;
}

const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;

async function main(): Promise<void> {
  timeLimit(900);
  await withBenchDatabase((url) => compare(url));
}

async function compare(url: string): Promise<void> {
  const levelDir = mkdtempSync(join(tmpdir(), 'bench-backends-level-'));
  const pgDir = mkdtempSync(join(tmpdir(), 'bench-backends-pg-'));
  const runtimes: Runtime[] = [];
  try {
    const level = await openRuntime(loadConfig(embeddedEnv(levelDir)));
    runtimes.push(level);
    const postgres = await openRuntime(loadConfig(embeddedEnv(pgDir, { DATABASE_URL: url })));
    runtimes.push(postgres);
    const now = Date.now();
    const store = bothStores(level.store, postgres.store);
    const tokens = await seedAccounts(store, 1, TOKENS, new Date(now - 31 * DAY).toISOString());
    log(`appending ${CALLS} usage events over 30 days to both logs`);
    let started = performance.now();
    await seedUsage(store, tokens, CALLS, now - 30 * DAY, 30 * DAY);
    const appendSeconds = (performance.now() - started) / 1000;
    log(`appended in ${round(appendSeconds)} s`);
    const levelSeconds = await project('LevelDB', level);
    const pgSeconds = await project('PostgreSQL', postgres);
    await sql(url, 'ANALYZE rm_docs');

    const account = (tokens[0] as SeededToken).accountId;
    const tokenId = (tokens[0] as SeededToken).tokenId;
    const backends = [];
    for (const [name, runtime] of [
      ['LevelDB', level],
      ['PostgreSQL', postgres],
    ] as const) {
      const { token, position } = await runtime.commands.createAccessToken(account, 'bench');
      await runtime.projector?.waitFor(position);
      const app = await buildServer(runtime);
      await app.ready();
      backends.push({ name, app, auth: { authorization: `Bearer ${token}` }, times: new Map<string, number[]>() });
    }
    const iso = (ms: number) => new Date(ms).toISOString();
    const periods: Array<[string, number]> = [
      ['24h', DAY],
      ['7d', 7 * DAY],
      ['30d', 30 * DAY],
    ];
    const calls: Array<[string, string]> = periods.flatMap(([label, span]): Array<[string, string]> => {
      const query = `?start=${iso(now - span)}&end=${iso(now)}`;
      return [
        [`user ${label}`, `/api/v1/metrics/user${query}`],
        [`token ${label}`, `/api/v1/metrics/tokens/${tokenId}${query}`],
      ];
    });
    started = performance.now();
    for (let round_ = 0; round_ < ROUNDS + WARMUP; round_++) {
      for (const [label, path] of calls) {
        // Alternate which backend goes first, so neither always follows the other's call.
        const order = round_ % 2 === 0 ? backends : [...backends].reverse();
        for (const b of order) {
          const t = performance.now();
          const res = await b.app.inject({ method: 'GET', url: path, headers: b.auth });
          const ms = performance.now() - t;
          if (res.statusCode !== 200) throw new Error(`${b.name} ${label}: ${res.statusCode} ${res.body}`);
          if (round_ >= WARMUP) b.times.set(label, [...(b.times.get(label) ?? []), ms]);
        }
      }
    }
    log(`measured in ${round((performance.now() - started) / 1000)} s`);
    const summary = backends.map((b) => {
      const all = [...b.times.values()].flat().sort((x, y) => x - y);
      const per = calls.map(([label]) => {
        const s = (b.times.get(label) ?? []).sort((x, y) => x - y);
        return `${label} ${round(pct(s, 0.5))}/${round(pct(s, 0.95))}`;
      });
      log(`${b.name}: p50 ${round(pct(all, 0.5))} ms, p95 ${round(pct(all, 0.95))} ms; p50/p95 per call (ms): ${per.join(', ')}`);
      return { name: b.name, p50: round(pct(all, 0.5)), p95: round(pct(all, 0.95)), per: per.join(', ') };
    });
    const [lv, pq] = summary as [(typeof summary)[0], (typeof summary)[0]];
    const ratio = round(pq.p95 / lv.p95);
    log(`PostgreSQL / LevelDB: p95 ${ratio}×, p50 ${round(pq.p50 / lv.p50)}×`);
    const method = `${ROUNDS} rounds of the user and one token's metrics over 24 h, 7 d and 30 d, the backends interleaved call by call, over ${CALLS} usage events (1 account, ${TOKENS} tokens, 5 chains, 6 methods, ~3 % errors, 30 days) in both logs`;
    emit({
      name: 'postgres_metrics_api_p95_at_1m_calls_ms',
      target: '<= 50',
      result: pq.p95,
      unit: 'ms',
      command: COMMAND,
      method: `${method}; PostgreSQL p50 ${pq.p50} ms (${pq.per}); LevelDB in the same run p95 ${lv.p95}, p50 ${lv.p50} ms (${lv.per}); p95 ratio ${ratio}×; projected from the start of the log: PostgreSQL ${round(pgSeconds)} s, LevelDB ${round(levelSeconds)} s; appended to both in ${round(appendSeconds)} s`,
    });
    emit({
      name: 'metrics_api_p95_at_1m_calls_ms',
      target: '<= 50',
      result: lv.p95,
      unit: 'ms',
      command: COMMAND,
      method: `LevelDB, the embedded side of postgres_metrics_api_p95_at_1m_calls_ms: ${method}; p50 ${lv.p50} ms`,
    });
    for (const b of backends) await b.app.close();
  } finally {
    for (const r of runtimes.reverse()) await r.close();
    rmSync(levelDir, { recursive: true, force: true });
    rmSync(pgDir, { recursive: true, force: true });
  }
}

runMain(main);
