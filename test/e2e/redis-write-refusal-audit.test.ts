import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { RedisUsageQueue } from '../../src/infra/usage/redis.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, newToken, type TestApp } from '../support/testApp.js';
import { usageCall } from '../support/usageCall.js';
import { expectEachRecordedOnce, recordedCalls } from '../support/usageLog.js';

/**
 * Redis up but refusing or losing writes, as an operator meets it: `maxmemory` reached under
 * `noeviction` (OOM), a failed RDB save with stop-writes-on-bgsave-error (MISCONF, which refuses
 * PING too), `min-replicas-to-write` unmet (NOREPLICAS), `CLIENT PAUSE WRITE`, REDIS_URL pointing
 * at a replica (READONLY), and a Redis flushed or restarted empty. For each: every call answered
 * 200 is recorded once when Redis takes writes again, a fail-open gateway answers throughout, a
 * fail-closed one answers 503 limits_unavailable (never a 500 or a hang), /readyz and /metrics
 * name the cause, and the log says it in one line when it starts and one when it ends.
 */

interface Service extends TestApp {
  base: string;
  warnings(): string[];
  infos(): string[];
}

const services: Service[] = [];
const dirs: string[] = [];
let upstream: FakeUpstream;
let redis: TestRedisServer;
let admin: Redis;

async function startService(redisUrl: string, env: Record<string, string> = {}): Promise<Service> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-redis-refusal-'));
  dirs.push(dataDir);
  const lines: Array<{ level: 'warn' | 'info'; message: string }> = [];
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_TOKEN,
    LOCAL_DEVNET: 'off',
    SIGNUP_MAX_PER_ADDRESS: '100000',
    REDIS_URL: redisUrl,
    UPSTREAM_LOCAL: upstream.url,
    ...env,
  });
  const runtime: Runtime = await openRuntime(config, undefined, {
    log: { warn: (message) => lines.push({ level: 'warn', message }), info: (message) => lines.push({ level: 'info', message }) },
  });
  await runtime.projector?.start();
  runtime.ingester?.start();
  await runtime.projector?.caughtUp;
  const app = await buildServer(runtime);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const service: Service = {
    app,
    runtime,
    dataDir,
    base: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    warnings: () => lines.filter((l) => l.level === 'warn').map((l) => l.message),
    infos: () => lines.filter((l) => l.level === 'info').map((l) => l.message),
    async close() {
      await app.close();
      await runtime.close();
    },
  };
  services.push(service);
  return service;
}

interface Answer {
  status: number;
  requestId: string;
  body: string;
  retryAfter: string | null;
}

/** `n` eth_chainId calls, five at a time, each with its status and request id; a call that hangs fails the test by its timeout. */
async function calls(service: Service, token: string, n: number): Promise<Answer[]> {
  const answers: Answer[] = [];
  const one = async (): Promise<void> => {
    const res = await fetch(`${service.base}/local/${token}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}',
      signal: AbortSignal.timeout(5000),
    });
    answers.push({
      status: res.status,
      requestId: String(res.headers.get('x-request-id')),
      body: await res.text(),
      retryAfter: res.headers.get('retry-after'),
    });
  };
  for (let i = 0; i < n; i += 5) await Promise.all(Array.from({ length: Math.min(5, n - i) }, one));
  return answers;
}

const statuses = (answers: Answer[]): Record<number, number> => {
  const counted: Record<number, number> = {};
  for (const a of answers) counted[a.status] = (counted[a.status] ?? 0) + 1;
  return counted;
};

async function readyz(service: Service) {
  const res = await service.app.inject({ method: 'GET', url: '/readyz' });
  return { status: res.statusCode, body: res.json() };
}

/** The Redis figures of one scrape of /metrics. */
async function redisMetrics(service: Service): Promise<Record<string, number>> {
  const text = (await service.app.inject({ method: 'GET', url: '/metrics' })).body;
  return Object.fromEntries([...text.matchAll(/^(gateway_redis_\S+|gateway_usage_queue_depth) (\S+)$/gm)].map((m) => [m[1] as string, Number(m[2])]));
}

const redisState = async (service: Service): Promise<string | undefined> => (await readyz(service)).body.redis?.state;

beforeAll(async () => {
  upstream = await startEvmFake();
  redis = await startTestRedisServer();
  admin = new Redis(redis.url);
});

afterAll(async () => {
  admin?.disconnect();
  for (const s of services) await s.close().catch(() => undefined);
  await redis?.stop();
  await upstream?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('a Redis that refuses writes', () => {
  let open: Service;
  let closed: Service;
  let openToken: { token: string; accountId: string };
  let closedToken: { token: string; accountId: string };
  beforeAll(async () => {
    open = await startService(redis.url);
    // Database 1 of the same server: the same refusals, its own usage stream and consumer group.
    closed = await startService(`${redis.url}/1`, { LIMITS_FAIL_CLOSED: 'true' });
    openToken = await newToken(open, { plan: 'unlimited' });
    closedToken = await newToken(closed, { plan: 'unlimited' });
  });
  afterAll(async () => {
    await open?.close();
    await closed?.close();
  });

  /**
   * Refuses writes with `refuse`, checks what both gateways answer and say meanwhile, takes them
   * again with `restore`, and checks that every call answered 200 is recorded once.
   */
  async function refusal(refuse: () => Promise<void>, restore: () => Promise<void>, reason: RegExp, state: 'refusing' | 'stalled' = 'refusing'): Promise<void> {
    const starts = state === 'refusing' ? /^Redis at redis:\/\/127\.0\.0\.1:\d+ refuses writes: / : /^Redis at redis:\/\/127\.0\.0\.1:\d+ stalled: /;
    const ends = state === 'refusing' ? /^Redis at \S+ accepts writes again, after \d+\.\d s$/ : /^Redis at \S+ is answering again, after \d+\.\d s$/;
    const warned = { open: open.warnings().length, closed: closed.warnings().length };
    const told = { open: open.infos().length, closed: closed.infos().length };
    const before = await calls(open, openToken.token, 10);
    const outages = (await redisMetrics(open)).gateway_redis_outages_total as number;
    await refuse();
    try {
      await until(async () => (await redisState(open)) === state && (await redisState(closed)) === state, 10_000);
      const during = await calls(open, openToken.token, 40);
      expect(statuses(during), 'a fail-open gateway answers while Redis refuses writes').toEqual({ 200: 40 });
      const refused = await calls(closed, closedToken.token, 10);
      expect(statuses(refused), 'a fail-closed gateway refuses: the limits cannot be counted').toEqual({ 503: 10 });
      for (const a of refused) {
        expect(JSON.parse(a.body)).toMatchObject({ error: { code: -32603, message: expect.stringMatching(/temporarily unavailable/) } });
        expect(a.retryAfter).toBe('1');
      }
      expect(await readyz(open)).toMatchObject({ status: 200, body: { status: 'degraded', redis: { state, reason: expect.stringMatching(reason) } } });
      expect(await readyz(closed)).toMatchObject({ status: 503, body: { status: 'unavailable', redis: { state } } });
      expect(await redisMetrics(open)).toMatchObject({
        gateway_redis_up: 0,
        [`gateway_redis_state{state="${state}"}`]: 1,
        gateway_redis_outages_total: outages + 1,
      });
      // One line when it starts, naming the cause, whatever the calls meanwhile.
      expect(open.warnings().slice(warned.open)).toEqual([expect.stringMatching(starts)]);
      expect(open.warnings().slice(warned.open)[0]).toMatch(reason);
      expect(closed.warnings().slice(warned.closed)).toHaveLength(1);
      expect(open.infos().slice(told.open)).toEqual([]);
      await restore();
      await until(async () => (await redisState(open)) === 'up' && (await redisState(closed)) === 'up', 10_000);
      expect(await readyz(closed)).toMatchObject({ status: 200, body: { status: 'ready' } });
      const after = await calls(open, openToken.token, 10);
      expect(statuses(after)).toEqual({ 200: 10 });
      expect(statuses(await calls(closed, closedToken.token, 5))).toEqual({ 200: 5 });
      await expectEachRecordedOnce(
        open.runtime.store,
        openToken.accountId,
        [...before, ...during, ...after].map((a) => a.requestId),
      );
      expect(open.warnings().slice(warned.open)).toHaveLength(1);
      expect(open.infos().slice(told.open)).toEqual([expect.stringMatching(ends)]);
      expect(closed.infos().slice(told.closed)).toHaveLength(1);
    } finally {
      await restore().catch(() => undefined);
    }
  }

  it('maxmemory reached under noeviction (OOM)', async () => {
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await refusal(
      async () => {
        await admin.config('SET', 'maxmemory', '1');
      },
      async () => {
        await admin.config('SET', 'maxmemory', '0');
      },
      /OOM command not allowed when used memory > 'maxmemory'/,
    );
  });

  it('a failed RDB save with stop-writes-on-bgsave-error (MISCONF, PING refused too)', async () => {
    const dir = String(((await admin.config('GET', 'dir')) as string[])[1]);
    // The snapshot's name taken by a directory: the save fails at its rename, even for root.
    const blocker = join(dir, String(((await admin.config('GET', 'dbfilename')) as string[])[1]));
    await admin.config('SET', 'save', '3600 1');
    const saved = async (status: 'ok' | 'err') => {
      await until(async () => {
        const info = await admin.info('persistence');
        return info.includes('rdb_bgsave_in_progress:0') && info.includes(`rdb_last_bgsave_status:${status}`);
      }, 10_000);
    };
    await refusal(
      async () => {
        mkdirSync(join(blocker, 'x'), { recursive: true });
        await admin.bgsave();
        await saved('err');
      },
      async () => {
        rmSync(blocker, { recursive: true, force: true });
        if ((await admin.info('persistence')).includes('rdb_last_bgsave_status:err')) {
          await admin.bgsave().catch(() => undefined);
          await saved('ok');
        }
      },
      /MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk/,
    );
    await admin.config('SET', 'save', '');
  });

  it('min-replicas-to-write unmet (NOREPLICAS)', async () => {
    await refusal(
      async () => {
        await admin.config('SET', 'min-replicas-to-write', '1');
      },
      async () => {
        await admin.config('SET', 'min-replicas-to-write', '0');
      },
      /NOREPLICAS Not enough good replicas to write/,
    );
  });

  it('writes held unanswered (CLIENT PAUSE WRITE) while PING answers: stalled', async () => {
    await refusal(
      async () => {
        await admin.client('PAUSE', 20_000, 'WRITE');
      },
      async () => {
        await admin.client('UNPAUSE');
      },
      /no answer to a write within \d+ ms \(PING answered\)/,
      'stalled',
    );
  });
});

describe('REDIS_URL at a replica (READONLY)', () => {
  let replica: TestRedisServer;
  afterAll(async () => {
    await replica?.stop();
  });

  it('serves, says so, and records every call once the replica is promoted', async () => {
    replica = await startTestRedisServer();
    const replicaAdmin = new Redis(replica.url);
    try {
      await replicaAdmin.replicaof('127.0.0.1', redis.port);
      await until(async () => (await replicaAdmin.info('replication')).includes('master_link_status:up'), 10_000);
      // Database 2: nothing of the other tests' services replicated into it.
      const service = await startService(`${replica.url}/2`);
      const { token, accountId } = await newToken(service, { plan: 'unlimited' }).catch((error: unknown) => {
        throw new Error(`a token on a service whose Redis is a replica: ${String(error)}`);
      });
      await until(async () => (await redisState(service)) === 'refusing', 10_000);
      expect(await readyz(service)).toMatchObject({
        status: 200,
        body: { status: 'degraded', redis: { state: 'refusing', reason: "READONLY You can't write against a read only replica" } },
      });
      expect(service.warnings()).toEqual([expect.stringMatching(/refuses writes: READONLY You can't write against a read only replica; /)]);
      const served = await calls(service, token, 30);
      expect(statuses(served)).toEqual({ 200: 30 });
      // The operator points it at a master, or promotes it: what was kept in memory goes there.
      await replicaAdmin.replicaof('NO', 'ONE');
      await until(async () => (await redisState(service)) === 'up', 10_000);
      await expectEachRecordedOnce(
        service.runtime.store,
        accountId,
        served.map((a) => a.requestId),
      );
      expect(service.infos()).toEqual([expect.stringMatching(/accepts writes again/)]);
      await service.close();
    } finally {
      replicaAdmin.disconnect();
    }
  });
});

describe('a Redis flushed, or restarted without persistence', () => {
  it('loses the records its stream held, says so in one line, and records every call after', async () => {
    const service = await startService(`${redis.url}/3`);
    const { token, accountId } = await newToken(service, { plan: 'unlimited' });
    const said = vi.spyOn(console, 'error');
    const lostLines = () => said.mock.calls.map((args) => String(args[0])).filter((line) => line.startsWith('usage queue: Redis lost'));
    try {
      const recorded = await calls(service, token, 10);
      await expectEachRecordedOnce(
        service.runtime.store,
        accountId,
        recorded.map((a) => a.requestId),
      );
      /** Calls whose records Redis acknowledged and holds in the stream (the ingester stopped meanwhile) when `empty` runs. */
      const lostTo = async (empty: () => Promise<void>): Promise<Answer[]> => {
        await service.runtime.ingester?.stop();
        const held = await calls(service, token, 10);
        expect(statuses(held)).toEqual({ 200: 10 });
        await empty();
        service.runtime.ingester?.start();
        return held;
      };

      const flushed = await lostTo(async () => {
        await admin.flushall();
      });
      const afterFlush = await calls(service, token, 10);
      await expectEachRecordedOnce(
        service.runtime.store,
        accountId,
        [...recorded, ...afterFlush].map((a) => a.requestId),
      );
      expect(lostLines()).toEqual([
        'usage queue: Redis lost the consumer group of usage (flushed, or restarted without persistence): the usage records it held that were not yet in the event store are lost; made again, reading on from what arrives now',
      ]);

      const restarted = await lostTo(async () => {
        await redis.stop();
        await redis.start();
      });
      await until(async () => (await redisState(service)) === 'up', 10_000);
      const afterRestart = await calls(service, token, 10);
      expect(statuses(afterRestart)).toEqual({ 200: 10 });
      await expectEachRecordedOnce(
        service.runtime.store,
        accountId,
        [...recorded, ...afterFlush, ...afterRestart].map((a) => a.requestId),
      );
      expect(lostLines()).toHaveLength(2);
      // What Redis held when it was emptied is gone: the line is all an operator gets of it.
      const kept = new Set((await recordedCalls(service.runtime.store, accountId)).map((c) => c.requestId));
      expect([...flushed, ...restarted].filter((a) => kept.has(a.requestId))).toEqual([]);
      await service.close();
    } finally {
      said.mockRestore();
    }
  });
});

describe('records Redis refuses for longer than the buffer holds', () => {
  it('are dropped past the bound, told in one line when it fills and one with the count when Redis takes them again', async () => {
    const lines: string[] = [];
    // Database 4, a bound of 5 records: what a long refusal does to a gateway's 1,000,000.
    const queue = new RedisUsageQueue(`${redis.url}/4`, { consumer: 'bound', bufferCapacity: 5, log: (line) => lines.push(line) });
    const db = new Redis(`${redis.url}/4`);
    try {
      await queue.whenReady();
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.config('SET', 'maxmemory', '1');
      try {
        const at = Date.parse('2026-03-01T00:00:00Z');
        for (let i = 0; i < 8; i++) queue.enqueue(usageCall('a-bound', 't-bound', new Date(at + i).toISOString(), { requestId: `bound-${i}` }));
        expect(queue.buffered).toBe(5);
        expect(queue.dropped).toBe(3);
        expect(lines).toEqual([
          'usage queue: 5 usage records wait in memory for Redis, its bound: the records of further calls are dropped (served and never recorded) until Redis takes them again',
        ]);
      } finally {
        await admin.config('SET', 'maxmemory', '0');
      }
      await queue.flush();
      expect(lines.slice(1)).toEqual(['usage queue: Redis takes usage records again; 3 were dropped meanwhile (served and never recorded)']);
      const entries = await db.xrange('usage', '-', '+');
      const records = entries.map(([, fields]) => Number(fields[fields.indexOf('n') + 1]));
      expect(
        records.reduce((a, b) => a + b, 0),
        'the 5 records kept reach Redis',
      ).toBe(5);
    } finally {
      db.disconnect();
      await queue.close();
    }
  });
});
