/**
 * Gateway memory with 100,000 tokens cached (issue 3). Writes 1,000 Unlimited accounts × 100
 * tokens straight into a fresh embedded store (events of the real shapes; the commands re-read
 * each account and would take minutes), starts the service as its own process
 * (bench/servers/warmGateway.ts: src/main.ts's wiring) once so its projector builds the read
 * models, restarts it (checkpoint present, as a gateway in service starts), measures its RSS
 * (baseline), fills its token cache with every token (the lookup a first call does), calls
 * through it with a sample of tokens, and measures its RSS again; then the same with the
 * production gateway role (bench/servers/benchConfig.ts: ROLE=gateway, limits and metering in a
 * redis-server it starts), which holds the target: a gateway process in service runs no projector.
 * SAMPLE_CALLS=<n> serves n calls instead of 2,000 before the second reading (the figures then
 * say so). The gateway role then serves on, to SUSTAINED_CALLS calls in all (40,000 by
 * default), each with another of the cached tokens, and its RSS is read once more: V8 lets its
 * old generation fill with what calls leave behind up to several times the live heap before a
 * full collection (bench/HISTORY.md), so a reading right after filling the cache does not tell
 * what a gateway in service holds.
 *
 *   npx tsx bench/gateway-rss.ts
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import { embeddedReadModelsDir } from '../src/infra/readmodels/index.js';
import { seedAccounts } from './lib/eventMix.js';
import { JSON_RPC_BODY } from './lib/load.js';
import { mappedRssMb, Processes, rssMb, runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { type GatewayOptions, startGateway, startRedis, startUpstream, writeBenchPlans } from './lib/services.js';

const COMMAND = 'npx tsx bench/gateway-rss.ts';
const ACCOUNTS = 1000;
const TOKENS_PER_ACCOUNT = 100;
/** Calls served through the gateway, 50 at a time over the cached tokens, before its RSS is read. */
const SAMPLE_CALLS = Number(process.env.SAMPLE_CALLS ?? 2000);
/** Calls the gateway role has served in all, over as many different tokens, at its sustained reading. */
const SUSTAINED_CALLS = Number(process.env.SUSTAINED_CALLS ?? 40_000);

async function waitForOutput(read: () => string, pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const m = pattern.exec(read());
    if (m) return m;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no ${pattern} within ${timeoutMs} ms:\n${read()}`);
}

interface WarmMeasure {
  readySeconds: number;
  idleRss: number;
  warmRss: number;
  /** Of warmRss: anonymous memory (heaps, malloc) and file-backed pages (the node binary, memory-mapped LevelDB tables). */
  warmAnon: number;
  warmFile: number;
  /** Of warmFile: the embedded stores' LevelDB tables, memory-mapped as they are read. */
  warmLevelDbTables: number;
  rssAfterGc: number;
  liveBefore: number;
  liveAfter: number;
  heapTotalMb: number;
  externalMb: number;
  cached: number;
  /** After `sustainedCalls` calls in all (when asked for): VmRSS and its anonymous part. */
  sustained: { calls: number; rss: number; anon: number } | null;
}

/** Calls `from` to `to` (exclusive) through the gateway, 50 at a time, each with another cached token. */
async function serve(url: string, tokens: Array<{ token: string }>, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i += 50) {
    const first = (i * 997) % (tokens.length - 50);
    await Promise.all(
      tokens.slice(first, first + Math.min(50, to - i)).map(async ({ token }) => {
        const res = await fetch(`${url}/eth/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON_RPC_BODY });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`call with a cached token answered ${res.status}`);
      }),
    );
  }
}

/**
 * The stand-in read models compacted, as a store in service settles between restarts: each
 * process leaves LevelDB a log and tables that overlap the older ones, and the next one's
 * lookups then start compactions as they go. The tables a compaction reads stay in the
 * process's RSS beside their successors for a while: the same gateway role measured 25 or 54 MB
 * of mapped tables from one run to the next. Measured from a compacted store, what the
 * gateway's lookups map is the same each time.
 */
async function compactReadModels(dataDir: string): Promise<void> {
  const db = new ClassicLevel<string, string>(embeddedReadModelsDir(dataDir));
  await db.open();
  try {
    await db.compactRange('\u0000', '\uffff');
  } finally {
    await db.close();
  }
}

/** Starts the service, fills its token cache with every token, calls through it, and reads its memory. */
async function warmAndMeasure(
  processes: Processes,
  gatewayOptions: GatewayOptions,
  tokens: Array<{ token: string }>,
  label: string,
  sustainedCalls = 0,
): Promise<WarmMeasure> {
  await compactReadModels(gatewayOptions.dataDir);
  const t = performance.now();
  const gateway = await startGateway(processes, gatewayOptions);
  const readySeconds = (performance.now() - t) / 1000;
  const pid = gateway.process.child.pid as number;
  await new Promise((r) => setTimeout(r, 1000));
  const idleRss = rssMb(pid);
  log(`${label}: ready in ${round(readySeconds)} s; RSS ${round(idleRss)} MB with no token cached`);

  process.kill(pid, 'SIGUSR2');
  const warmed = await waitForOutput(gateway.process.output, /warmed (\d+) tokens in (\d+) ms, cache size (\d+), live memory before ([\d.]+) MB/, 90_000);
  const liveBefore = Number(warmed[4]);
  const cached = Number(warmed[3]);
  if (cached < tokens.length) throw new Error(`only ${cached} of ${tokens.length} tokens cached:\n${gateway.process.output()}`);
  log(`${label}: cache filled: ${warmed[0]}`);

  // Calls through the gateway with cached tokens: the process serves, and its RSS includes serving.
  await serve(gateway.url, tokens, 0, SAMPLE_CALLS);
  await new Promise((r) => setTimeout(r, 2000));
  const warmRss = rssMb(pid);
  const warmAnon = rssMb(pid, 'RssAnon');
  const warmFile = rssMb(pid, 'RssFile');
  const warmLevelDbTables = mappedRssMb(pid, (path) => path.endsWith('.ldb'));
  log(
    `${label}: RSS ${round(warmRss)} MB (anonymous ${round(warmAnon)}, file-backed ${round(warmFile)} of which LevelDB tables ${round(warmLevelDbTables)}) with ${cached} tokens cached, after ${SAMPLE_CALLS} calls`,
  );
  let sustained: WarmMeasure['sustained'] = null;
  if (sustainedCalls > SAMPLE_CALLS) {
    await serve(gateway.url, tokens, SAMPLE_CALLS, sustainedCalls);
    await new Promise((r) => setTimeout(r, 2000));
    sustained = { calls: sustainedCalls, rss: rssMb(pid), anon: rssMb(pid, 'RssAnon') };
    log(`${label}: RSS ${round(sustained.rss)} MB (anonymous ${round(sustained.anon)}) after ${sustainedCalls} calls in all, each with another token`);
  }
  // A full collection (the process runs with --expose-gc): what of the memory is live.
  process.kill(pid, 'SIGUSR2');
  const afterGc = await waitForOutput(
    gateway.process.output,
    /live memory ([\d.]+) MB, after gc: rss (\d+) MB, heap total (\d+) MB, external (\d+) MB/,
    10_000,
  );
  const liveAfter = Number(afterGc[1]);
  log(`${label}: live memory ${liveBefore} MB before the cache was filled; at the end ${afterGc[0]}`);
  await processes.stop(gateway.process, 15_000);
  return {
    readySeconds,
    idleRss,
    warmRss,
    warmAnon,
    warmFile,
    warmLevelDbTables,
    rssAfterGc: Number(afterGc[2]),
    liveBefore,
    liveAfter,
    heapTotalMb: Number(afterGc[3]),
    externalMb: Number(afterGc[4]),
    cached,
    sustained,
  };
}

async function main(): Promise<void> {
  timeLimit(240);
  const processes = new Processes();
  const workDir = processes.workDir('bench-rss-');
  try {
    const plansFile = writeBenchPlans(workDir);
    const dataDir = join(workDir, 'data');
    let t = performance.now();
    const store = await LevelEventStore.open(join(dataDir, 'eventstore'), { sync: false });
    const tokens = await seedAccounts(store, ACCOUNTS, TOKENS_PER_ACCOUNT, new Date().toISOString());
    await store.close();
    const tokensFile = join(workDir, 'tokens.txt');
    writeFileSync(tokensFile, `${tokens.map((x) => x.token).join('\n')}\n`);
    log(`wrote ${tokens.length} tokens of ${ACCOUNTS} accounts in ${round((performance.now() - t) / 1000)} s`);

    const upstream = await startUpstream(processes);
    const gatewayOptions: GatewayOptions = {
      dataDir,
      upstreamUrl: upstream.url,
      plansFile,
      entry: 'bench/servers/warmGateway.ts',
      nodeFlags: ['--expose-gc'],
      env: { TOKENS_FILE: tokensFile },
      label: 'gateway (warmable)',
    };
    // First start: the projector builds the read models from scratch; then a restart, as a
    // gateway in service starts: with its checkpoint and read models on disk.
    t = performance.now();
    const first = await startGateway(processes, gatewayOptions);
    const catchUpSeconds = (performance.now() - t) / 1000;
    const catchUpRss = rssMb(first.process.child.pid as number);
    await processes.stop(first.process, 15_000);
    log(`first start: projected ${tokens.length} tokens, ready in ${round(catchUpSeconds)} s, RSS ${round(catchUpRss)} MB`);

    const all = await warmAndMeasure(processes, gatewayOptions, tokens, 'ROLE=all');
    const redis = await startRedis(processes);
    const role = await warmAndMeasure(
      processes,
      { ...gatewayOptions, redisUrl: redis.url, env: { ...gatewayOptions.env, BENCH_ROLE: 'gateway' }, label: 'gateway role (warmable)' },
      tokens,
      'gateway role',
      SUSTAINED_CALLS,
    );
    const { readySeconds, idleRss, warmRss, rssAfterGc, liveBefore, liveAfter, cached } = all;

    emit({
      name: 'gateway_role_rss_100k_tokens_cached',
      target: '<= 200',
      result: round(role.warmRss),
      unit: 'MB',
      ratio: round(role.warmRss / role.idleRss),
      baseline: `the same process before its cache was filled ${round(role.idleRss)} MB; of the ${round(role.warmRss)} MB, anonymous ${round(role.warmAnon)} MB and file-backed ${round(role.warmFile)} MB (the node binary, and ${round(role.warmLevelDbTables)} MB of the stand-in read models' LevelDB tables, memory-mapped as the cache was filled: a gateway on MongoDB maps none)`,
      command: COMMAND,
      method: `VmRSS of the production gateway process, compiled and with the environment of \`npm start\` (bench/servers/warmGateway.ts with BENCH_ROLE=gateway: ROLE=gateway, limits and metering in Redis, the embedded read models standing in for MongoDB) 2 s after every one of ${role.cached} tokens was looked up through runtime.gateway.tokens.get and ${SAMPLE_CALLS} calls were served`,
    });
    if (role.sustained) {
      emit({
        name: 'gateway_role_rss_100k_tokens_sustained',
        target: '<= 200',
        result: round(role.sustained.rss),
        unit: 'MB',
        ratio: round(role.sustained.rss / role.idleRss),
        baseline: `the same process before its cache was filled ${round(role.idleRss)} MB, after ${SAMPLE_CALLS} calls ${round(role.warmRss)} MB; anonymous ${round(role.sustained.anon)} MB of the ${round(role.sustained.rss)}; then, after a full collection, ${role.rssAfterGc} MB with ${role.liveAfter} MB live (V8 heap and array buffers; V8 heap total ${role.heapTotalMb} MB)`,
        command: COMMAND,
        method: `VmRSS of the same production gateway process (above) 2 s after it served ${role.sustained.calls} calls in all, 50 at a time, each with another of the cached tokens (a first call of its second for each: the limiter asks Redis for it): what V8 keeps between full collections under sustained serving`,
      });
    }
    emit({
      name: 'gateway_rss_100k_tokens_cached',
      target: null,
      result: round(warmRss),
      unit: 'MB',
      ratio: round(warmRss / idleRss),
      baseline: `the same process before its cache was filled ${round(idleRss)} MB`,
      command: COMMAND,
      method: `VmRSS of the service process (ROLE=all, embedded stores, bench/servers/warmGateway.ts) 2 s after every one of ${cached} tokens (${ACCOUNTS} accounts × ${TOKENS_PER_ACCOUNT}) was looked up through runtime.gateway.tokens.get and ${SAMPLE_CALLS} calls were served`,
    });
    emit({
      name: 'gateway_rss_100k_tokens_cached_after_full_gc',
      target: null,
      result: rssAfterGc,
      unit: 'MB',
      ratio: round(rssAfterGc / idleRss),
      baseline: `the same process before its cache was filled ${round(idleRss)} MB`,
      command: COMMAND,
      method: `the same process right after a forced full collection (global.gc): what of the RSS is live; V8 heap total ${all.heapTotalMb} MB, external ${all.externalMb} MB`,
    });
    emit({
      name: 'token_cache_live_bytes_per_token',
      target: null,
      result: round(((liveAfter - liveBefore) * 1048576) / cached),
      unit: 'bytes',
      baseline: `live memory ${liveBefore} MB before filling the cache, ${liveAfter} MB after`,
      command: COMMAND,
      method:
        "V8 heap used plus array buffers after a full collection (the process runs with --expose-gc for this), after − before filling the cache (the tokens read a line at a time, so the bench's own list is in neither), ÷ tokens cached",
    });
    emit({
      name: 'gateway_rss_after_projecting_100k_tokens',
      target: null,
      result: round(catchUpRss),
      unit: 'MB',
      ratio: round(catchUpRss / idleRss),
      baseline: `the restarted process, nothing cached ${round(idleRss)} MB`,
      command: COMMAND,
      method: `VmRSS of the first process (ROLE=all) right after its projector built the read models from scratch (${tokens.length + ACCOUNTS} account and token events); ready in ${round(catchUpSeconds)} s, the restart in ${round(readySeconds)} s`,
    });
  } finally {
    await processes.stopAll();
  }
}

runMain(main);
