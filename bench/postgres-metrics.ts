/**
 * The metrics API on PostgreSQL read models (issue 37): the same 30 days of minute data as
 * bench/metrics-latency.ts (43,200 usage events, real projections), in a database of its own on
 * the machine's PostgreSQL, then `GET /api/v1/metrics/user` over 30 d, 7 d, 24 h and 6 h. Shows
 * that the queries are primary-key index range scans: rm_docs' sequential and index scans
 * counted around the queries (pg_stat_user_tables), and the plan of a roll-up range. Then the
 * 7-day call's queries on the read models' sessions against sessions at PostgreSQL's default
 * planner costs, interleaved: wall time, and CPU per call in Node and in PostgreSQL; and the
 * 7-day call after a quiet spell.
 *
 *   npx tsx bench/postgres-metrics.ts    (PG_BENCH_ADMIN_URL, default postgres://postgres@127.0.0.1:5432/test)
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { PostgresReadModelStore, READ_SESSION_SETTINGS } from '../src/infra/readmodels/postgres.js';
import { UsageQueries } from '../src/projections/metricsQueries.js';
import { openRuntime } from '../src/runtime.js';
import { buildServer } from '../src/server.js';
import { type SeededToken, seedAccounts, seedUsage } from './lib/eventMix.js';
import { sql, withBenchDatabase } from './lib/postgres.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const COMMAND = 'npx tsx bench/postgres-metrics.ts';
const DAY = 86_400_000;
const MINUTES = 30 * 24 * 60;
const ROUNDS = 40;

async function main(): Promise<void> {
  timeLimit(290);
  await withBenchDatabase((url) => measure(url));
}

async function measure(url: string): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-pg-metrics-'));
  const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir, { DATABASE_URL: url })));
  try {
    await runtime.projector?.start();
    const now = Date.now();
    const tokens = await seedAccounts(runtime.store, 1, 2, new Date(now - 31 * DAY).toISOString());
    log(`seeding ${MINUTES} usage events over 30 days`);
    const seeded = performance.now();
    await seedUsage(runtime.store, tokens, MINUTES, now - 30 * DAY, 30 * DAY);
    const head = await runtime.store.headPosition();
    if (head) await runtime.projector?.waitFor(head, 240_000);
    const projectedPerSecond = MINUTES / ((performance.now() - seeded) / 1000);
    log(`appended and projected ${MINUTES} events at ${round(projectedPerSecond)} events/s`);
    await sql(url, 'ANALYZE rm_docs');
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
    const scans = () => sql<{ seq_scan: string; idx_scan: string }>(url, `SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'rm_docs'`);
    // The counters reach pg_stat_user_tables when a backend reports them (at most every second).
    await new Promise((r) => setTimeout(r, 1500));
    const [before] = await scans();
    const all: number[] = [];
    for (const [label, query] of queries) {
      const times: number[] = [];
      for (let i = 0; i < ROUNDS + 3; i++) {
        const started = performance.now();
        const res = await app.inject({ method: 'GET', url: `/api/v1/metrics/user${query}`, headers: auth });
        const ms = performance.now() - started;
        if (res.statusCode !== 200) throw new Error(`${label}: ${res.statusCode} ${res.body}`);
        if (i >= 3) times.push(ms);
      }
      times.sort((a, b) => a - b);
      all.push(...times);
      log(`${label}: p50 ${round(times[Math.floor(times.length / 2)] as number)} ms, p95 ${round(times[Math.floor(times.length * 0.95)] as number)} ms`);
    }
    await new Promise((r) => setTimeout(r, 1500));
    const [after] = await scans();
    const seqScans = Number(after?.seq_scan) - Number(before?.seq_scan);
    const indexScans = Number(after?.idx_scan) - Number(before?.idx_scan);
    log(`rm_docs during the queries: ${indexScans} index scans, ${seqScans} sequential scans`);
    const quiet = await afterQuiet(() => app.inject({ method: 'GET', url: `/api/v1/metrics/user${queries[2]?.[1]}`, headers: auth }));
    const planner = await compareCosts(url, (tokens[0] as SeededToken).accountId, now);
    const [{ key: sample } = { key: '' }] = await sql<{ key: string }>(url, `SELECT key FROM rm_docs WHERE collection = 'usage_rollups' LIMIT 1`);
    const prefix = sample.split('/').slice(0, 2).join('/');
    const plan = await sql<{ 'QUERY PLAN': string }>(
      withSettings(url, READ_SESSION_SETTINGS),
      `EXPLAIN SELECT key, doc FROM rm_docs WHERE collection = $1 AND key >= $2 AND ($3::text IS NULL OR key < $3) ORDER BY key ASC LIMIT $4`,
      ['usage_rollups', `${prefix}/`, `${prefix}0`, null],
    );
    log(`plan of a roll-up range (${prefix}/…):\n  ${plan.map((row) => row['QUERY PLAN']).join('\n  ')}`);
    all.sort((a, b) => a - b);
    emit({
      name: 'postgres_metrics_api_p95_ms',
      target: '<= 50',
      result: round(all[Math.floor(all.length * 0.95)] as number),
      unit: 'ms',
      command: COMMAND,
      method: `${ROUNDS} calls each of 30 d, 30 d with chain, 7 d, 24 h and 6 h over ${MINUTES} minute-spaced usage events on PostgreSQL read models; p50 ${round(all[Math.floor(all.length / 2)] as number)} ms; rm_docs scans during the calls: ${indexScans} by index, ${seqScans} sequential`,
    });
    emit({
      name: 'postgres_metrics_7d_queries_ms',
      target: null,
      result: planner.store.wall,
      unit: 'ms',
      command: COMMAND,
      method: `the 7-day call's read-model queries (usage, error groups, recent errors: ${planner.store.rows} rows), ${COMPARE_ROUNDS} rounds interleaved with the same on sessions at PostgreSQL's default costs; p50 wall / Node CPU / PostgreSQL CPU per call: read-model sessions ${planner.store.wall} / ${planner.store.nodeCpu} / ${planner.store.pgCpu} ms, default costs ${planner.defaults.wall} / ${planner.defaults.nodeCpu} / ${planner.defaults.pgCpu} ms`,
    });
    emit({
      name: 'postgres_metrics_7d_after_quiet_ms',
      target: null,
      result: quiet.quiet,
      unit: 'ms',
      command: COMMAND,
      method: `the 7-day call, the first after ${QUIET_MS / 1000} s without calls (the slower of ${QUIET_SPELLS}); the same call back to back: ${quiet.warm} ms`,
    });
    emit({
      name: 'postgres_append_and_project_events_per_s',
      target: null,
      result: round(projectedPerSecond),
      unit: 'events/s',
      command: COMMAND,
      method: `${MINUTES} usage events appended in batches of 1000 and projected by the real projections, one process`,
    });
    await app.close();
  } finally {
    await runtime.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const COMPARE_ROUNDS = 40;
const QUIET_MS = 11_000;
const QUIET_SPELLS = 2;

/** A call after a quiet spell longer than pg's default idle timeout (10 s), against the same call back to back. */
async function afterQuiet(call: () => Promise<unknown>): Promise<{ quiet: number; warm: number }> {
  const timed = async () => {
    const started = performance.now();
    await call();
    return performance.now() - started;
  };
  const quiet: number[] = [];
  const warm: number[] = [];
  for (let spell = 0; spell < QUIET_SPELLS; spell++) {
    await new Promise((r) => setTimeout(r, QUIET_MS));
    quiet.push(await timed());
    for (let i = 0; i < 3; i++) warm.push(await timed());
  }
  const result = { quiet: round(Math.max(...quiet)), warm: round(median(warm)) };
  log(`7d after ${QUIET_MS / 1000} s quiet: ${quiet.map(round).join(', ')} ms; back to back ${result.warm} ms`);
  return result;
}

function withSettings(url: string, options: string): string {
  const u = new URL(url);
  u.searchParams.set('options', options);
  return u.toString();
}

/** CPU seconds (user + system) of the server processes serving `database`, where PostgreSQL runs on this machine (null elsewhere). */
async function serverCpuMs(url: string, database: string): Promise<number | null> {
  const rows = await sql<{ pid: number }>(url, 'SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [database]);
  let ticks = 0;
  try {
    for (const { pid } of rows) {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      ticks += Number(fields[11]) + Number(fields[12]);
    }
  } catch {
    return null;
  }
  return ticks * 10; // USER_HZ is 100 on Linux
}

interface QueryCost {
  wall: number;
  nodeCpu: number;
  pgCpu: number | null;
  rows: number;
}

/**
 * The 7-day call's read-model queries on the store's sessions and on sessions at PostgreSQL's
 * default planner costs (an `options` in the URL takes the place of the store's), interleaved in
 * blocks so that both see the same machine. On a machine shared with other work, CPU per call
 * is the steadier figure: wall time carries everyone else's load.
 */
async function compareCosts(url: string, accountId: string, now: number): Promise<{ store: QueryCost; defaults: QueryCost }> {
  const database = new URL(url).pathname.slice(1);
  const stores = {
    store: await PostgresReadModelStore.open(url),
    defaults: await PostgresReadModelStore.open(withSettings(url, '-c random_page_cost=4')),
  };
  const end = Math.floor(now / 60_000) * 60_000;
  const scope = { accountId, start: end - 7 * DAY, end, granularity: 'hour', chain: null } as const;
  const samples = {
    store: { wall: [] as number[], nodeCpu: [] as number[], pgCpu: 0, pgKnown: true, rows: 0 },
    defaults: { wall: [] as number[], nodeCpu: [] as number[], pgCpu: 0, pgKnown: true, rows: 0 },
  };
  try {
    for (let block = 0; block < 4; block++) {
      for (const name of ['store', 'defaults'] as const) {
        const queries = new UsageQueries(stores[name]);
        const into = samples[name];
        const call = () => Promise.all([queries.usage(scope), queries.errorGroups(scope), queries.recentErrors(scope)]);
        await call();
        const serverBefore = await serverCpuMs(url, database);
        for (let i = 0; i < COMPARE_ROUNDS / 4; i++) {
          const cpu = process.cpuUsage();
          const started = performance.now();
          const [report, groups, recent] = await call();
          into.wall.push(performance.now() - started);
          const used = process.cpuUsage(cpu);
          into.nodeCpu.push((used.user + used.system) / 1000);
          into.rows = report.series.length + groups.errors.length + recent.length;
        }
        const serverAfter = await serverCpuMs(url, database);
        if (serverBefore === null || serverAfter === null) into.pgKnown = false;
        else into.pgCpu += serverAfter - serverBefore;
      }
    }
  } finally {
    await Promise.all([stores.store.close(), stores.defaults.close()]);
  }
  const cost = (s: typeof samples.store): QueryCost => ({
    wall: round(median(s.wall)),
    nodeCpu: round(median(s.nodeCpu)),
    pgCpu: s.pgKnown ? round(s.pgCpu / COMPARE_ROUNDS) : null,
    rows: s.rows,
  });
  const result = { store: cost(samples.store), defaults: cost(samples.defaults) };
  log(
    `7 d queries, p50 wall / Node CPU / PostgreSQL CPU per call: read-model sessions ${result.store.wall} / ${result.store.nodeCpu} / ${result.store.pgCpu} ms; PostgreSQL's default costs ${result.defaults.wall} / ${result.defaults.nodeCpu} / ${result.defaults.pgCpu} ms`,
  );
  return result;
}

runMain(main);
