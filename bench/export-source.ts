/**
 * Where exports should read their rows (issue 33 item 4: "once the log is compact, exports can
 * read it directly instead of a second copy of every row in the read models; measure before
 * choosing"): the raw rows of the read models (`usage_request_blocks`, their own LevelDB
 * `DATA_DIR/readmodels-rows`, streamed by `UsageQueries.requestRows`) against the usage log
 * itself (`usage-<account>`, compact `UsageBatchRecorded` events), on the embedded stores. One
 * account's log in two shapes, calls spread evenly over 48 hours (3 tokens, 4 chains × 5
 * methods, ~3 % errors, 8 client IPs, two gateways' request ids; an event is appended at its
 * last call's time, and 1 call in 200 is recorded late, up to 9 minutes before its event's append):
 *   A  a busy account: A_CALLS calls (1,000,000) in events of 2,000 calls;
 *   B  a tenant among many: B_CALLS calls (200,000) in events of 1 or 2 calls (its events lie
 *      next to each other in the log here; see SCATTER below).
 * A child process writes each shape's log (as the ingester appends it), projects it into
 * empty read models (the usage metrics projection, which writes the raw rows, as the service's
 * projector does), closes the stores and opens them once more (the write-ahead logs become
 * tables), and measures on disk: bytes per call of `readmodels-rows` and of `eventstore`.
 * Then, each in a fresh process (`--expose-gc`, a baseline after a GC, the peak from the
 * kernel's VmHWM reset at the start, RssAnon sampled every 10 ms), ROUNDS times with the
 * sources' order rotated:
 *   full   every row of the 48 hours, as UsageCall objects, page by page;
 *   slice  the hour from 24 h to 25 h;
 * from  rows  `UsageQueries.requestRows` over the read models opened as the service opens them;
 *       log   a prototype here (`logRows`): the stream read with `readStream(fromRevision,
 *             maxCount)` about EXPORT_PAGE_ROWS calls a read, `usageRecordsOf`, the period
 *             filter. Its bound: a call reaches the log at most LATENESS_MS (10 minutes) after
 *             its time; one later than that would be left out. An event's calls then lie within
 *             that margin before its append, so the events before the first whose earliest call
 *             (the first 48 bits of its id, `usageBatchEventId`) is at or after the period's
 *             start − margin hold none of the period, nor do those from the first whose earliest
 *             call is at or after its end + margin, where reading stops. The first is found by a
 *             search on revision: doubling from the stream's first event, then bisecting, one
 *             event a read (the port has no read of a stream's last revision). With fewer calls
 *             than the defaults, A's events span more than 10 minutes of the simulated clock
 *             and the margin is that span (said when it is);
 *       port  the same prototype through the embedded default's storage thread
 *             (openStorageThread: the event store lives there, the API's thread reads it over
 *             the message port, where the raw rows are read straight from LevelDB).
 * Printed: time, CPU, peak RSS growth (all of it, and the anonymous part: the rest is table files
 * LevelDB maps in), reads, events and calls decoded, medians of ROUNDS; a slice also run 5 times
 * more in its process, once its code is compiled (the first run pays for that in both sources).
 * Both sources must give the same rows (count and a checksum), else it fails. It records nothing.
 *
 *   npx tsx bench/export-source.ts                          (~2.5 min)
 *   A_CALLS=200000 B_CALLS=50000 ROUNDS=1 npx tsx bench/export-source.ts   (a quick look)
 *   SCATTER=4096 SHAPES=B npx tsx bench/export-source.ts    (B alone, its events each 4 KB apart in the log)
 *
 * SCATTER=n writes n bytes of another stream's event (incompressible) after each of B's events,
 * so that every one of them lies in a LevelDB block of its own, as with thousands of tenants an
 * ingest batch (one event per account) puts a few tens of KB between two of a tenant's events;
 * the bytes per call of B's log then count the filler too (printed so).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.js';
import type { UsageCall, UsageRecord } from '../src/domain/usage.js';
import { usageStream } from '../src/domain/usage.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import type { EventStore, NewEvent, StoredEvent } from '../src/infra/eventstore/port.js';
import { embeddedReadModelsDir, embeddedRowsDir, LevelReadModelStore, openReadModels } from '../src/infra/readmodels/index.js';
import { openStorageThread } from '../src/infra/storagethread/index.js';
import { usageBatchCodec } from '../src/infra/usage/ingester.js';
import { EXPORT_PAGE_ROWS, UsageQueries } from '../src/projections/metricsQueries.js';
import { ProjectionRunner } from '../src/projections/runner.js';
import { usageMetricsProjection } from '../src/projections/usageMetrics.js';
import { usageRecordsOf } from '../src/projections/usageRecord.js';
import { prng } from '../test/support/prng.js';
import { Processes, runMain, type Started, timeLimit, tsNodeArgs } from './lib/processes.js';
import { log, median } from './lib/report.js';

const A_CALLS = Number(process.env.A_CALLS ?? 1_000_000);
const B_CALLS = Number(process.env.B_CALLS ?? 200_000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SCATTER = Number(process.env.SCATTER ?? 0);
const WARM_RUNS = 5;
/** Which shapes to run: `SHAPES=B` for B alone. */
const RUN_SHAPES = (process.env.SHAPES ?? 'A,B').split(',').filter((s): s is ShapeName => s === 'A' || s === 'B');
const HOUR_MS = 3_600_000;
const SPAN_MS = 48 * HOUR_MS;
/** How late a call may reach the log: a log read goes this far past the period's end (and starts this far before its start). */
const LATENESS_MS = 10 * 60_000;
const ACCOUNT = 'acc_BenchExport00000';
const TOKENS = ['tok_BenchExportTokA0', 'tok_BenchExportTokB0', 'tok_BenchExportTokC0'];
const CHAINS = ['eth', 'eth', 'base', 'polygon', 'arbitrum'];
const METHODS = ['eth_call', 'eth_getBalance', 'eth_blockNumber', 'eth_getLogs', 'eth_getTransactionReceipt'];
const IPS = ['203.0.113.7', '203.0.113.45', '198.51.100.12', '198.51.100.200', '192.0.2.33', '2001:db8::17', '2001:db8:1::4', '203.0.113.250'];
const MB = 1024 * 1024;
const SELF = fileURLToPath(import.meta.url);

type ShapeName = 'A' | 'B';
type Source = 'rows' | 'log' | 'port';
type Range = 'full' | 'slice';
const SHAPES: Record<ShapeName, { calls: number; label: string }> = {
  A: { calls: A_CALLS, label: `A busy account: ${A_CALLS.toLocaleString('en-US')} calls in events of 2,000` },
  B: {
    calls: B_CALLS,
    label: `B tenant among many: ${B_CALLS.toLocaleString('en-US')} calls in events of 1-2${SCATTER > 0 ? `, ${SCATTER} B of other events between two` : ''}`,
  },
};

/** How late a call of the simulated log is at most: 1 call in 200 has its time up to this much before its event's append. */
const LATE_MS = 9 * 60_000;
const eventCalls = (shape: ShapeName): number => (shape === 'A' ? 2000 : 2);

/**
 * The margin a log read takes around the period: LATENESS_MS, or more when an event's own calls
 * span more of the simulated clock (A_CALLS below ~580,000: 2,000 calls then span over 10 minutes,
 * its first call as late, to its event's append, as the last 2,000th of the calls is).
 */
const marginMs = (shape: ShapeName): number => Math.max(LATENESS_MS, Math.ceil(((eventCalls(shape) - 1) * SPAN_MS) / SHAPES[shape].calls));

/**
 * The shape's calls in the order they reach the log, cut into events (2,000 calls, or 1-2): the
 * calls' times evenly spread over the 48 hours; an event is appended at its last call's time,
 * and 1 call in 200 is late: its time up to LATE_MS before its event's append.
 */
function* eventsOf(shape: ShapeName, start: number): Generator<UsageRecord[]> {
  const calls = SHAPES[shape].calls;
  const random = prng(shape === 'A' ? 1 : 2);
  const stems = [`${randomBytes(12).toString('base64url')}-`, `${randomBytes(12).toString('base64url')}-`];
  const counters = [0, 0];
  const timeOf = (i: number): number => start + Math.floor((i * SPAN_MS) / calls);
  for (let first = 0; first < calls; ) {
    const size = Math.min(calls - first, shape === 'A' ? 2000 : random() < 0.5 ? 1 : 2);
    const appendedAt = timeOf(first + size - 1);
    const event: UsageRecord[] = [];
    for (let i = first; i < first + size; i++) {
      const g = random() < 0.5 ? 0 : 1;
      // A busy account has most of its gateway's calls; a small tenant's calls are thousands apart.
      counters[g] = (counters[g] as number) + (shape === 'A' ? 1 + Math.floor(random() * 3) : 1 + Math.floor(random() * 5000));
      const at = random() < 0.005 ? Math.max(start, appendedAt - Math.floor(random() * LATE_MS)) : timeOf(i);
      const p = random();
      const limited = p < 0.005;
      const failed = !limited && p < 0.015;
      const reverted = !limited && !failed && p < 0.03;
      const cached = !limited && !failed && random() < 0.3;
      const chain = CHAINS[Math.floor(random() * CHAINS.length)] as string;
      const totalMs = limited ? 0.3 : cached ? 0.2 + Math.floor(random() * 40) / 100 : 15 + Math.floor(random() * 20_000) / 100;
      event.push({
        requestId: `${stems[g]}${(counters[g] as number).toString(36)}`,
        at: new Date(at).toISOString(),
        accountId: ACCOUNT,
        tokenId: TOKENS[Math.floor(random() * random() * TOKENS.length)] as string,
        chain,
        method: METHODS[Math.floor(random() * random() * METHODS.length)] as string,
        status: limited ? 429 : failed ? 502 : 200,
        rpcErrorCode: limited ? -32005 : failed ? -32010 : reverted ? 3 : null,
        errorMessage: limited ? 'rate limit exceeded' : failed ? 'upstream unavailable' : reverted ? 'execution reverted' : null,
        totalMs,
        upstreamMs: limited || cached ? null : Math.round((totalMs - 0.4) * 100) / 100,
        clientIp: IPS[Math.floor(random() * random() * IPS.length)] as string,
        upstream: limited || cached ? null : `${chain}-${1 + Math.floor(random() * 2)}`,
        retentionDays: 30,
        charged: !limited,
        ...(limited ? {} : { cache: cached ? ('hit' as const) : ('miss' as const) }),
      });
    }
    yield event;
    first += size;
  }
}

const sizeOf = (dir: string): number =>
  readdirSync(dir, { recursive: true, encoding: 'utf8' }).reduce((sum, f) => {
    const stat = statSync(join(dir, f));
    return stat.isFile() ? sum + stat.size : sum;
  }, 0);

/** Child: writes one shape's log, projects it, reopens the stores; prints what it wrote and the bytes on disk. */
async function writeShape(shape: ShapeName, dataDir: string, start: number): Promise<void> {
  let t = performance.now();
  const storeDir = join(dataDir, 'eventstore');
  const store = await LevelEventStore.open(storeDir, { sync: false });
  let events = 0;
  let calls = 0;
  let inFlight: Array<Promise<unknown>> = [];
  const filler = SCATTER > 0 && shape === 'B' ? randomBytes(SCATTER).toString('base64').slice(0, SCATTER) : null;
  for (const records of eventsOf(shape, start)) {
    inFlight.push(store.append(usageStream(ACCOUNT), [usageBatchCodec.eventOf(records, calls)], 'any'));
    if (filler !== null) {
      const other: NewEvent = { id: randomUUID(), type: 'BenchFiller', data: { filler } };
      inFlight.push(store.append(`filler-${events % 1000}`, [other], 'any'));
    }
    events++;
    calls += records.length;
    if (inFlight.length >= (shape === 'A' ? 4 : 256)) {
      await Promise.all(inFlight);
      inFlight = [];
    }
  }
  await Promise.all(inFlight);
  const writeSeconds = (performance.now() - t) / 1000;
  t = performance.now();
  const readModels = await openReadModels({ dataDir });
  const runner = new ProjectionRunner(store, readModels, [usageMetricsProjection]);
  await runner.start();
  await runner.caughtUp;
  await runner.stop();
  await readModels.close();
  await store.close();
  const projectSeconds = (performance.now() - t) / 1000;
  // Opened once more, as after any restart: what the write-ahead logs held is in tables.
  await (await LevelEventStore.open(storeDir)).close();
  await (await LevelReadModelStore.open(embeddedRowsDir(dataDir))).close();
  await (await LevelReadModelStore.open(embeddedReadModelsDir(dataDir))).close();
  const result = {
    events,
    calls,
    writeSeconds,
    projectSeconds,
    logBytes: sizeOf(storeDir),
    rowsBytes: sizeOf(embeddedRowsDir(dataDir)),
    readModelsBytes: sizeOf(embeddedReadModelsDir(dataDir)),
  };
  console.log(`RESULT ${JSON.stringify(result)}`);
}

/** The earliest call's time of a usage event: the first 48 bits of its id (`usageBatchEventId`); the append time for an id of another form. */
function earliestCallMs(event: StoredEvent): number {
  const id = event.id;
  return id[14] === '7' ? Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16) : Date.parse(event.created);
}

interface LogStats {
  searchReads: number;
  pageReads: number;
  events: number;
  calls: number;
  /** Time awaiting the page reads (LevelDB, JSON.parse of each event; the port's copy), and decoding and filtering their calls. */
  readMs: number;
  decodeMs: number;
}

/**
 * The revision to read a usage stream from for calls at or after `from` + the margin: the first
 * event whose earliest call is at or after `from` (or past the stream's end), by doubling from
 * the stream's first event then bisecting; one-event reads, counted. Earliest call times are
 * not quite in revision order (late calls): the bisection lands on some event at or after `from`
 * right after one before it, and every event before that one was appended before it, so within
 * the margin after `from`: before the period.
 */
async function firstRevisionFrom(store: EventStore, stream: string, from: number, stats: LogStats): Promise<number | null> {
  const probe = async (revision: number): Promise<StoredEvent | undefined> => {
    stats.searchReads++;
    return (await store.readStream(stream, { fromRevision: revision, maxCount: 1 }))[0];
  };
  const first = await probe(0);
  if (first === undefined) return null;
  if (earliestCallMs(first) >= from) return first.revision;
  // lo: an event before `from`; hi: one at or after it, or past the end.
  let lo = first.revision;
  let hi: number | null = null;
  for (let step = 1; hi === null; step *= 2) {
    const e = await probe(lo + step);
    if (e === undefined) hi = lo + step;
    else if (earliestCallMs(e) >= from) hi = e.revision;
    else lo = e.revision;
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    const e = await probe(mid);
    if (e === undefined || e.revision >= hi) hi = mid;
    else if (earliestCallMs(e) >= from) hi = e.revision;
    else lo = e.revision;
  }
  return hi;
}

/** The prototype: an account's calls in [start, end) from its usage stream, about EXPORT_PAGE_ROWS calls a read, in the order recorded. */
async function* logRows(store: EventStore, accountId: string, start: number, end: number, margin: number, stats: LogStats): AsyncGenerator<UsageCall[]> {
  const stream = usageStream(accountId);
  const startIso = new Date(start).toISOString();
  const endIso = new Date(end).toISOString();
  const stop = end + margin;
  let revision = await firstRevisionFrom(store, stream, start - margin, stats);
  // One event first: the calls an event holds size the next read.
  let maxCount = 1;
  while (revision !== null) {
    let t = performance.now();
    const events = await store.readStream(stream, { fromRevision: revision, maxCount });
    stats.pageReads++;
    stats.readMs += performance.now() - t;
    t = performance.now();
    const rows: UsageCall[] = [];
    let calls = 0;
    let done = events.length < maxCount;
    for (const event of events) {
      if (earliestCallMs(event) >= stop) {
        done = true;
        break;
      }
      const records = usageRecordsOf(event);
      stats.events++;
      calls += records.length;
      for (const r of records) if (r.at >= startIso && r.at < endIso) rows.push(r);
    }
    stats.calls += calls;
    stats.decodeMs += performance.now() - t;
    if (rows.length > 0) yield rows;
    const last = events[events.length - 1];
    if (done || last === undefined) return;
    revision = last.revision + 1;
    maxCount = Math.min(EXPORT_PAGE_ROWS, Math.max(1, Math.round((EXPORT_PAGE_ROWS * events.length) / Math.max(1, calls))));
  }
}

/** Peak resident memory since the last reset (Linux: /proc/self/clear_refs, VmHWM), in bytes. */
/**
 * Resident memory from /proc/self/status (Linux), in bytes: `VmHWM` the peak since the last reset
 * (/proc/self/clear_refs), `RssAnon` the process's own memory. The rest, `RssFile`, is mostly
 * the LevelDB table files the reads map in (page cache, given back under pressure).
 */
function status(): { peak: number; anon: number } {
  const text = readFileSync('/proc/self/status', 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { peak: kb('VmHWM'), anon: kb('RssAnon') };
}

interface Measured {
  ms: number;
  cpuMs: number;
  /** Peak RSS above the baseline, all of it (VmHWM) and anonymous only (sampled every 10 ms). */
  rssGrowthMb: number;
  anonGrowthMb: number;
  /** A slice's median time when run again in the same process (WARM_RUNS times). */
  warmMs: number | null;
  heapGrowthMb: number;
  rows: number;
  checksum: number;
  stats: LogStats | null;
}

/** Child: one export from one source, in a fresh process. */
async function measureOne(shape: ShapeName, dataDir: string, source: Source, range: Range, start: number): Promise<void> {
  const period = range === 'full' ? { start, end: start + SPAN_MS } : { start: start + 24 * HOUR_MS, end: start + 25 * HOUR_MS };
  const newStats = (): LogStats => ({ searchReads: 0, pageReads: 0, events: 0, calls: 0, readMs: 0, decodeMs: 0 });
  const stats = newStats();
  let pagesOf: (stats: LogStats) => AsyncIterable<UsageCall[]>;
  let close: () => Promise<void>;
  if (source === 'rows') {
    const readModels = await openReadModels({ dataDir });
    const queries = new UsageQueries(readModels);
    pagesOf = () => queries.requestRows({ accountId: ACCOUNT, ...period, granularity: 'hour', chain: null });
    close = () => readModels.close();
  } else if (source === 'log') {
    const store = await LevelEventStore.open(join(dataDir, 'eventstore'));
    pagesOf = (s) => logRows(store, ACCOUNT, period.start, period.end, marginMs(shape), s);
    close = () => store.close();
  } else {
    const storage = await openStorageThread({ dataDir, consumer: 'bench', plans: loadConfig({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off' }).plans });
    pagesOf = (s) => logRows(storage.store, ACCOUNT, period.start, period.end, marginMs(shape), s);
    close = () => storage.close();
  }
  const consume = async (pages: AsyncIterable<UsageCall[]>): Promise<{ rows: number; checksum: number }> => {
    let rows = 0;
    let checksum = 0;
    for await (const page of pages) {
      for (const r of page) {
        rows++;
        checksum = (checksum + Math.round(r.totalMs * 100) * 7 + r.status + r.requestId.length + r.at.charCodeAt(15)) % 2_147_483_647;
      }
    }
    return { rows, checksum };
  };
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the child with --expose-gc');
  gc();
  await new Promise((resolve) => setTimeout(resolve, 50));
  gc();
  const base = process.memoryUsage();
  writeFileSync('/proc/self/clear_refs', '5');
  const baseAnon = status().anon;
  let peakHeap = base.heapUsed;
  let peakAnon = baseAnon;
  const sampler = setInterval(() => {
    peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
    peakAnon = Math.max(peakAnon, status().anon);
  }, 10);
  const cpu = process.cpuUsage();
  const started = performance.now();
  const { rows, checksum } = await consume(pagesOf(stats));
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  clearInterval(sampler);
  peakAnon = Math.max(peakAnon, status().anon);
  const rssGrowthMb = (status().peak - base.rss) / MB;
  // A slice again, WARM_RUNS times in the same process: what it takes once the code is compiled, as in a server that has run a while.
  const warm: number[] = [];
  for (let i = 0; range === 'slice' && i < WARM_RUNS; i++) {
    const t = performance.now();
    await consume(pagesOf(newStats()));
    warm.push(performance.now() - t);
  }
  const measured: Measured = {
    ms,
    cpuMs: (used.user + used.system) / 1000,
    rssGrowthMb,
    warmMs: warm.length > 0 ? median(warm) : null,
    anonGrowthMb: (peakAnon - baseAnon) / MB,
    heapGrowthMb: (peakHeap - base.heapUsed) / MB,
    rows,
    checksum,
    stats: source === 'rows' ? null : stats,
  };
  await close();
  console.log(`RESULT ${JSON.stringify(measured)}`);
}

async function runChild<T>(processes: Processes, label: string, env: Record<string, string>): Promise<T> {
  const child: Started = processes.start(label, process.execPath, tsNodeArgs(SELF, ['--expose-gc']), { env });
  const code = await child.exited;
  const line = child
    .output()
    .split('\n')
    .find((l) => l.startsWith('RESULT '));
  if (code !== 0 || line === undefined) throw new Error(`${label} failed (exit ${code}):\n${child.output()}`);
  return JSON.parse(line.slice('RESULT '.length)) as T;
}

const f1 = (v: number): string => v.toFixed(1);
const ms0 = (v: number): string => Math.round(v).toLocaleString('en-US');

async function main(): Promise<void> {
  timeLimit(900);
  const processes = new Processes();
  // Hour-aligned, ending an hour ago: nothing is past its retention, the slice is a whole hour.
  const start = Math.floor((Date.now() - SPAN_MS - HOUR_MS) / HOUR_MS) * HOUR_MS;
  const dirs: Record<ShapeName, string> = { A: processes.workDir('bench-export-source-a-'), B: processes.workDir('bench-export-source-b-') };
  const common = { BENCH_EXPORT_START: String(start) };
  for (const shape of RUN_SHAPES) {
    if (marginMs(shape) > LATENESS_MS)
      log(`${shape}: an event spans ${f1(marginMs(shape) / 60_000)} minutes of the simulated clock: the log reads take that margin`);
    const w = await runChild<{
      events: number;
      calls: number;
      writeSeconds: number;
      projectSeconds: number;
      logBytes: number;
      rowsBytes: number;
      readModelsBytes: number;
    }>(processes, `write ${shape}`, { ...common, BENCH_EXPORT_ROLE: 'write', BENCH_EXPORT_SHAPE: shape, BENCH_EXPORT_DIR: dirs[shape] });
    log(
      `${SHAPES[shape].label}: ${w.events.toLocaleString('en-US')} events written in ${f1(w.writeSeconds)} s, projected in ${f1(w.projectSeconds)} s (separate process)`,
    );
    log(
      `  on disk per call: raw rows (readmodels-rows) ${f1(w.rowsBytes / w.calls)} B, event log (eventstore) ${f1(w.logBytes / w.calls)} B${SCATTER > 0 && shape === 'B' ? ' (with the filler)' : ''}; rest of the read models ${f1(w.readModelsBytes / w.calls)} B`,
    );
  }
  const sources: Source[] = ['rows', 'log', 'port'];
  const results = new Map<string, Measured[]>();
  for (let round = 1; round <= ROUNDS; round++) {
    // Each round starts with the next source: over 3 rounds each goes first once.
    const order = sources.map((_, i) => sources[(i + round - 1) % sources.length] as Source);
    for (const shape of RUN_SHAPES) {
      for (const range of ['full', 'slice'] as const) {
        for (const source of order) {
          const m = await runChild<Measured>(processes, `${shape} ${range} ${source}`, {
            ...common,
            BENCH_EXPORT_ROLE: 'measure',
            BENCH_EXPORT_SHAPE: shape,
            BENCH_EXPORT_DIR: dirs[shape],
            BENCH_EXPORT_SOURCE: source,
            BENCH_EXPORT_RANGE: range,
          });
          const key = `${shape} ${range} ${source}`;
          results.set(key, [...(results.get(key) ?? []), m]);
          log(
            `round ${round}: ${key}: ${m.rows.toLocaleString('en-US')} rows in ${ms0(m.ms)} ms (CPU ${ms0(m.cpuMs)} ms${m.warmMs === null ? '' : `; again: ${f1(m.warmMs)} ms`}), peak RSS +${f1(m.rssGrowthMb)} MB (anonymous +${f1(m.anonGrowthMb)} MB), heap +${f1(m.heapGrowthMb)} MB${m.stats ? `; ${m.stats.searchReads} search reads + ${m.stats.pageReads} page reads (${ms0(m.stats.readMs)} ms), ${m.stats.events} events / ${m.stats.calls} calls decoded (${ms0(m.stats.decodeMs)} ms)` : ''}`,
          );
        }
      }
    }
  }
  log(`medians of ${ROUNDS} (rows = raw rows via requestRows; log = the usage stream in process; port = the same over the storage thread):`);
  for (const shape of RUN_SHAPES) {
    for (const range of ['full', 'slice'] as const) {
      const byRows = results.get(`${shape} ${range} rows`) ?? [];
      for (const source of sources) {
        const ms = results.get(`${shape} ${range} ${source}`) ?? [];
        const first = ms[0];
        if (first === undefined) continue;
        for (const m of ms) {
          const reference = byRows[0];
          if (reference && (m.rows !== reference.rows || m.checksum !== reference.checksum))
            throw new Error(
              `${shape} ${range} ${source}: ${m.rows} rows (checksum ${m.checksum}) against the raw rows' ${reference.rows} (${reference.checksum})`,
            );
        }
        const s = first.stats;
        log(
          `  ${shape} ${range.padEnd(5)} ${source.padEnd(4)} ${ms0(median(ms.map((m) => m.ms))).padStart(6)} ms, CPU ${ms0(median(ms.map((m) => m.cpuMs))).padStart(6)} ms${first.warmMs === null ? '' : ` (again in the same process: ${f1(median(ms.map((m) => m.warmMs ?? 0)))} ms)`}, peak RSS +${f1(median(ms.map((m) => m.rssGrowthMb)))} MB, anonymous +${f1(median(ms.map((m) => m.anonGrowthMb)))} MB (${first.rows.toLocaleString('en-US')} rows)${s ? `; reads ${s.searchReads} search + ${s.pageReads} pages (${ms0(median(ms.map((m) => m.stats?.readMs ?? 0)))} ms), ${s.events.toLocaleString('en-US')} events / ${s.calls.toLocaleString('en-US')} calls decoded (${ms0(median(ms.map((m) => m.stats?.decodeMs ?? 0)))} ms)` : ''}`,
        );
      }
    }
  }
  await processes.stopAll();
}

const role = process.env.BENCH_EXPORT_ROLE;
const dir = process.env.BENCH_EXPORT_DIR ?? '';
const startMs = Number(process.env.BENCH_EXPORT_START);
if (role === 'write') runMain(() => writeShape(process.env.BENCH_EXPORT_SHAPE as ShapeName, dir, startMs));
else if (role === 'measure')
  runMain(() =>
    measureOne(process.env.BENCH_EXPORT_SHAPE as ShapeName, dir, process.env.BENCH_EXPORT_SOURCE as Source, process.env.BENCH_EXPORT_RANGE as Range, startMs),
  );
else runMain(main);
