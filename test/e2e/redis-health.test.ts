import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN } from '../support/testApp.js';

/** A whole service in process on a Redis the test stops and freezes, its Redis log lines captured. */
async function startService(redisUrl: string, env: Record<string, string> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-redis-health-'));
  const lines: Array<{ level: 'warn' | 'info'; message: string }> = [];
  const config = loadConfig({ DATA_DIR: dataDir, ADMIN_TOKEN, LOCAL_DEVNET: 'off', REDIS_URL: redisUrl, ...env });
  const runtime: Runtime = await openRuntime(config, undefined, {
    log: { warn: (message) => lines.push({ level: 'warn', message }), info: (message) => lines.push({ level: 'info', message }) },
  });
  await runtime.projector?.start();
  await runtime.projector?.caughtUp;
  const app: FastifyInstance = await buildServer(runtime);
  return {
    app,
    warnings: () => lines.filter((l) => l.level === 'warn').map((l) => l.message),
    infos: () => lines.filter((l) => l.level === 'info').map((l) => l.message),
    async readyz() {
      const res = await app.inject({ method: 'GET', url: '/readyz' });
      return { status: res.statusCode, body: res.json() };
    },
    /** The Redis figures of one scrape of /metrics. */
    async redisMetrics(): Promise<Record<string, number>> {
      const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
      return Object.fromEntries([...text.matchAll(/^(gateway_redis_\S+) (\S+)$/gm)].map((m) => [m[1] as string, Number(m[2])]));
    },
    async close() {
      await app.close();
      await runtime.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

type Service = Awaited<ReturnType<typeof startService>>;

/** Polls `probe` until it returns true (each try after the previous answered), failing after `ms`. */
async function until(what: string, probe: () => Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const redisState = async (s: Service) => (await s.readyz()).body.redis?.state;

describe('Redis trouble is visible', () => {
  let redis: TestRedisServer;
  let failOpen: Service;
  let failClosed: Service;
  beforeAll(async () => {
    redis = await startTestRedisServer();
    failOpen = await startService(redis.url);
    failClosed = await startService(redis.url, { LIMITS_FAIL_CLOSED: 'true' });
  });
  afterAll(async () => {
    redis?.resume();
    await failOpen?.close();
    await failClosed?.close();
    await redis?.stop();
  });

  it('says so once when Redis is unreachable, in /readyz and /metrics, and once when it is back', async () => {
    expect(await failOpen.readyz()).toMatchObject({ status: 200, body: { status: 'ready', redis: { state: 'up' } } });
    expect(await failOpen.redisMetrics()).toEqual({
      gateway_redis_up: 1,
      'gateway_redis_state{state="up"}': 1,
      'gateway_redis_state{state="down"}': 0,
      'gateway_redis_state{state="stalled"}': 0,
      'gateway_redis_state{state="refusing"}': 0,
      gateway_redis_outages_total: 0,
    });

    await redis.stop();
    await until('both services see Redis down', async () => (await redisState(failOpen)) === 'down' && (await redisState(failClosed)) === 'down');
    // Still serving with limits counted in process: in rotation, saying why it is degraded.
    expect(await failOpen.readyz()).toMatchObject({ status: 200, body: { status: 'degraded', redis: { state: 'down', reason: expect.any(String) } } });
    // Refusing every call meanwhile: out of rotation.
    expect(await failClosed.readyz()).toMatchObject({ status: 503, body: { status: 'unavailable', redis: { state: 'down' } } });
    expect(await failOpen.redisMetrics()).toMatchObject({ gateway_redis_up: 0, 'gateway_redis_state{state="down"}': 1, gateway_redis_outages_total: 1 });
    // Its connections retry every 50 ms to 1 s meanwhile, and calls fail over: none of that is logged again.
    for (let i = 0; i < 20; i++) await failOpen.app.inject({ method: 'GET', url: '/readyz' });
    await new Promise((r) => setTimeout(r, 1500));
    expect(failOpen.warnings()).toHaveLength(1);
    expect(failOpen.warnings()[0]).toMatch(/^Redis at redis:\/\/127\.0\.0\.1:\d+ unreachable: /);
    expect(failOpen.infos()).toEqual([]);

    await redis.start();
    await until('both services see Redis up', async () => (await redisState(failOpen)) === 'up' && (await redisState(failClosed)) === 'up');
    expect(await failOpen.readyz()).toMatchObject({ status: 200, body: { status: 'ready', redis: { state: 'up' } } });
    expect(await failClosed.readyz()).toMatchObject({ status: 200, body: { status: 'ready' } });
    expect(await failOpen.redisMetrics()).toMatchObject({ gateway_redis_up: 1, 'gateway_redis_state{state="up"}': 1, gateway_redis_outages_total: 1 });
    expect(failOpen.warnings()).toHaveLength(1);
    expect(failOpen.infos()).toHaveLength(1);
    expect(failOpen.infos()[0]).toMatch(/^Redis at \S+ is answering again, after \d+\.\d s$/);
    expect(failClosed.warnings()).toHaveLength(1);
    expect(failClosed.infos()).toHaveLength(1);
  });

  it('says so when Redis is connected but not answering (stalled), and when it answers again', async () => {
    const warned = failOpen.warnings().length;
    const outages = (await failOpen.redisMetrics()).gateway_redis_outages_total as number;
    redis.pause();
    try {
      await until('Redis seen stalled', async () => (await redisState(failOpen)) === 'stalled');
      expect(await failOpen.readyz()).toMatchObject({
        status: 200,
        body: { status: 'degraded', redis: { state: 'stalled', reason: expect.stringMatching(/PING/) } },
      });
      // The scrape answers although the usage queue's depth cannot be read meanwhile.
      expect(await failOpen.redisMetrics()).toMatchObject({
        gateway_redis_up: 0,
        'gateway_redis_state{state="stalled"}': 1,
        gateway_redis_outages_total: outages + 1,
      });
      expect(failOpen.warnings().slice(warned)).toEqual([expect.stringMatching(/ stalled: no answer to PING within \d+ ms;/)]);
    } finally {
      redis.resume();
    }
    await until('Redis seen up again', async () => (await redisState(failOpen)) === 'up');
    expect((await failOpen.redisMetrics()).gateway_redis_up).toBe(1);
    expect(failOpen.warnings()).toHaveLength(warned + 1);
    expect(failOpen.infos()).toHaveLength(2);
  });
});
