import { randomUUID } from 'node:crypto';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import type { LimitRequest } from '../../src/infra/limits/port.js';
import { monthKey, RedisLimiter } from '../../src/infra/limits/redis.js';
import { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { eventually, until } from '../support/eventually.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';

/**
 * Monthly units Redis did not take while it could not be reached, or refused, are held by the
 * gateway and sent once Redis answers again, once: the refunds of calls the gateway failed to
 * serve (docs/decisions.md, "A call the gateway failed to serve is not charged"), and the calls a
 * fail-open gateway counted in process meanwhile. A Redis with an append-only file, as production
 * runs it: the months outlive its restart.
 */
const COMMAND_TIMEOUT_MS = 200;

describe('monthly units Redis did not take', () => {
  let server: TestRedisServer;
  let direct: Redis;
  beforeAll(async () => {
    server = await startTestRedisServer({ persistent: true });
    direct = new Redis(server.url, { retryStrategy: () => 50, maxRetriesPerRequest: 1 });
    direct.on('error', () => {});
  });
  afterAll(async () => {
    direct.disconnect();
    await server.stop();
  });

  /** The gateway's limiter as src/infra/limits/index.ts composes it (fail-open). */
  const open = (maxOwedKeys?: number, stop: { closeSettleMs?: number; log?: (line: string) => void } = {}): ResilientLimiter =>
    new ResilientLimiter(
      new LeasedLimiter(new RedisLimiter(server.url, { commandTimeoutMs: COMMAND_TIMEOUT_MS, ...(maxOwedKeys ? { maxOwedKeys } : {}), ...stop })),
    );

  const request = (overrides: Partial<LimitRequest> = {}): LimitRequest => {
    const id = randomUUID();
    return { tokenId: `tok${id}`, rps: 100, monthly: { key: `account:${id}`, limit: 1000 }, cost: 1, nowMs: Date.now(), ...overrides };
  };
  /** A call of a token with its own monthly limit: one month counts it. */
  const ownLimitRequest = (cost: number): LimitRequest => {
    const tokenId = `tok${randomUUID()}`;
    return request({ tokenId, monthly: { key: `token:${tokenId}`, limit: 1000 }, cost });
  };

  /** A month's count as Redis has it (null: no key). */
  const inRedis = async (bucket: string, nowMs: number): Promise<number | null> => {
    const value = await direct.get(monthKey(bucket, nowMs));
    return value === null ? null : Number(value);
  };

  /** Redis stopped, the limiter answering from memory, `during` done, then Redis back and answering the limiter again. */
  async function outage(limiter: ResilientLimiter, during: () => Promise<void>): Promise<void> {
    await server.stop();
    await until(() => limiter.backend === 'fallback');
    await during();
    await server.start();
    await until(() => limiter.backend === 'redis', 10_000);
    // A call of another token: the limiter is on Redis again.
    expect((await limiter.take(request())).granted).toBe(1);
  }

  it('a refund made while Redis was stopped reaches the month once Redis is back', async () => {
    const limiter = open();
    try {
      await limiter.whenReady();
      const req = request({ cost: 5 });
      const own = `token:${req.tokenId}`;
      expect((await limiter.take(req)).granted).toBe(5);
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(5);
      // The token's own month is counted by a command sent after the take's reply: landed before the outage.
      expect(
        await eventually(
          () => inRedis(own, req.nowMs),
          (v) => v === 5,
        ),
      ).toBe(5);

      // Three of the five calls failed (every node down): their units go back.
      await outage(limiter, async () => {
        await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 3, nowMs: req.nowMs });
      });

      expect(
        await eventually(
          () => inRedis(req.monthly.key, req.nowMs),
          (v) => v === 2,
        ),
      ).toBe(2);
      expect(
        await eventually(
          () => inRedis(own, req.nowMs),
          (v) => v === 2,
        ),
      ).toBe(2);
      // Once: later calls on Redis send nothing more.
      for (let i = 0; i < 3; i++) await limiter.take(request());
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(2);
      expect(limiter.unsettled).toEqual({ counted: { cap: 0, unknown: 0 }, givenBack: { cap: 0, unknown: 0 } });
    } finally {
      await limiter.close();
    }
  });

  it('calls counted in memory while Redis was stopped reach the month, less their refunds', async () => {
    const limiter = open();
    try {
      await limiter.whenReady();
      const req = request({ cost: 5 });
      expect((await limiter.take(req)).granted).toBe(5);
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(5);
      expect(
        await eventually(
          () => inRedis(`token:${req.tokenId}`, req.nowMs),
          (v) => v === 5,
        ),
      ).toBe(5);

      await outage(limiter, async () => {
        // Four calls admitted from memory (seeded with Redis's 5), one of which failed.
        expect(await limiter.take({ ...req, cost: 4, nowMs: req.nowMs + 1000 })).toMatchObject({ granted: 4, monthly: { remaining: 1000 - 9 } });
        await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 1, nowMs: req.nowMs + 1000 });
      });

      // 5 counted on Redis, 4 in memory, 1 given back: 8, in the bucket and the token's own month.
      expect(
        await eventually(
          () => inRedis(req.monthly.key, req.nowMs),
          (v) => v === 8,
        ),
      ).toBe(8);
      expect(
        await eventually(
          () => inRedis(`token:${req.tokenId}`, req.nowMs),
          (v) => v === 8,
        ),
      ).toBe(8);
      const next = await limiter.take({ ...req, cost: 1, nowMs: Date.now() + 2000 });
      expect(next.monthly.remaining).toBe(1000 - 9);
    } finally {
      await limiter.close();
    }
  });

  it('a refund Redis answered with an error is sent again once it takes writes, once', async () => {
    const limiter = open();
    try {
      await limiter.whenReady();
      const req = ownLimitRequest(4);
      expect((await limiter.take(req)).granted).toBe(4);
      // Redis refuses every write (NOREPLICAS) but answers: the refund's script fails, nothing ran.
      await direct.config('SET', 'min-replicas-to-write', '1');
      try {
        await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 3, nowMs: req.nowMs });
        expect(await inRedis(req.monthly.key, req.nowMs)).toBe(4);
      } finally {
        await direct.config('SET', 'min-replicas-to-write', '0');
      }
      await until(async () => (await limiter.take(request())).granted === 1 && limiter.backend === 'redis', 5000);
      expect(
        await eventually(
          () => inRedis(req.monthly.key, req.nowMs),
          (v) => v === 1,
        ),
      ).toBe(1);
      for (let i = 0; i < 3; i++) await limiter.take(request());
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(1);
    } finally {
      await limiter.close();
    }
  });

  it('a refund whose reply was lost is never sent again: it may have run (it did here)', async () => {
    const limiter = open();
    try {
      await limiter.whenReady();
      const req = ownLimitRequest(5);
      expect((await limiter.take(req)).granted).toBe(5);
      // Redis frozen with the connection open: the refund is sent, its reply never read in time.
      server.pause();
      try {
        await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 2, nowMs: req.nowMs });
        await until(() => limiter.unsettled.givenBack.unknown === 2, 10_000);
      } finally {
        server.resume();
      }
      await until(async () => (await limiter.take(request())).granted === 1 && limiter.backend === 'redis', 10_000);
      for (let i = 0; i < 3; i++) await limiter.take(request());
      // Redis ran the frozen refund when it woke; sent again it would say 1.
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(3);
    } finally {
      await limiter.close();
    }
  });

  it('a give-back on a month Redis does not hold (expired, lost) leaves it absent, never negative', async () => {
    const limiter = new RedisLimiter(server.url, { commandTimeoutMs: COMMAND_TIMEOUT_MS });
    try {
      await limiter.whenReady();
      const req = request();
      await limiter.release(req.monthly.key, req.tokenId, req.nowMs, 3);
      expect(await inRedis(req.monthly.key, req.nowMs)).toBeNull();
      expect((await limiter.take(req)).granted).toBe(1);
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(1);
    } finally {
      await limiter.close();
    }
  });

  it('holds at most maxOwedKeys months, counting what it dropped past them', async () => {
    const limiter = open(2);
    try {
      await limiter.whenReady();
      const reqs = [0, 1, 2].map(() => ownLimitRequest(3));
      for (const req of reqs) expect((await limiter.take(req)).granted).toBe(3);
      await outage(limiter, async () => {
        for (const req of reqs) await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 2, nowMs: req.nowMs });
      });
      const [first, second, third] = reqs as [LimitRequest, LimitRequest, LimitRequest];
      expect(
        await eventually(
          () => inRedis(second.monthly.key, second.nowMs),
          (v) => v === 1,
        ),
      ).toBe(1);
      expect(await inRedis(first.monthly.key, first.nowMs)).toBe(1);
      expect(await inRedis(third.monthly.key, third.nowMs)).toBe(3);
      expect(limiter.unsettled.givenBack.cap).toBe(2);
    } finally {
      await limiter.close();
    }
  });
  describe('a gateway that stops while Redis is away', () => {
    /** Redis stopped, and the limiter answering from memory. */
    async function stopped(limiter: ResilientLimiter): Promise<void> {
      await server.stop();
      await until(() => limiter.backend === 'fallback');
    }

    it('sends the calls it counted in memory when Redis comes back within its stop', async () => {
      const logged: string[] = [];
      const limiter = open(undefined, { log: (line) => logged.push(line) });
      await limiter.whenReady();
      const req = ownLimitRequest(1);
      expect((await limiter.take(req)).granted).toBe(1);
      await stopped(limiter);
      expect((await limiter.take({ ...req, cost: 3 })).granted).toBe(3);
      const closing = limiter.close();
      // Back a moment into the stop (a restart of Redis beside the gateway's).
      await new Promise((resolve) => setTimeout(resolve, 300));
      await server.start();
      await closing;
      // Before: the stop waited one command's time (200 ms) and dropped the 3: the month said 1.
      expect(await inRedis(req.monthly.key, req.nowMs)).toBe(4);
      expect(logged).toEqual([]);
    });

    it.each([
      ['an answer is given up on within the stop', { commandTimeoutMs: COMMAND_TIMEOUT_MS, closeSettleMs: 8_000 }, 8_000],
      // Fail-closed's 500 ms: ioredis gives up after 5 s, the stop's 2 s end first.
      ['the stop ends first', { commandTimeoutMs: 500 }, 2_000],
    ])('waits for the months it is sending when the stop comes, and names what got no answer: %s', async (_, options, settleMs) => {
      // The limiter reaches Redis through a relay that, once told, holds every script sent (Redis then never answers them).
      const relay = await holdingRelay(server.port);
      const logged: string[] = [];
      const limiter = new ResilientLimiter(new LeasedLimiter(new RedisLimiter(relay.url, { ...options, log: (line) => logged.push(line) })));
      let closing: Promise<void> | null = null;
      try {
        await limiter.whenReady();
        const req = ownLimitRequest(1);
        expect((await limiter.take(req)).granted).toBe(1);
        await stopped(limiter);
        expect((await limiter.take({ ...req, cost: 3 })).granted).toBe(3);
        relay.holdScripts = true;
        await server.start();
        // Back, the limiter sends the 3 held: held by the relay, unanswered.
        await until(() => relay.held > 0, 10_000);
        closing = limiter.close();
        // Before: the stop saw nothing held (the months were being sent), said nothing, and the 3 went without a trace.
        await until(() => logged.length > 0, settleMs + 3_000);
        expect(logged).toEqual([`limits: stopping with units Redis did not take within ${settleMs} ms: 3 sent and never answered (Redis may have them)`]);
        // And it stops: no QUIT left waiting behind the scripts Redis never answered (before: ~5 s more).
        const settled = await Promise.race([closing.then(() => 'stopped'), new Promise((resolve) => setTimeout(resolve, 1_000, 'waiting'))]);
        expect(settled).toBe('stopped');
      } finally {
        relay.close();
        await (closing ?? limiter.close());
      }
    });

    /** What is sent and held: Redis never answers it, and the caller is let go at the command's time. */
    type Held = (limiter: RedisLimiter, relay: { holdScripts: boolean }) => Promise<void>;
    const heldRefund: Held = async (limiter, relay) => {
      const req = ownLimitRequest(3);
      expect((await limiter.take(req)).granted).toBe(3);
      relay.holdScripts = true;
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 2, nowMs: req.nowMs });
    };
    const heldTake: Held = async (limiter, relay) => {
      relay.holdScripts = true;
      // Redis would count what it grants: the count is unknown.
      await expect(limiter.take(ownLimitRequest(3))).rejects.toThrow('no reply from Redis within 500 ms');
    };
    it.each([
      ['a refund', heldRefund, 2],
      ['a take', heldTake, 3],
    ] as Array<[string, Held, number]>)("waits for %s Redis holds when the stop comes, names it, and stops (fail-closed's 500 ms)", async (_, hold, units) => {
      const relay = await holdingRelay(server.port);
      const logged: string[] = [];
      const limiter = new RedisLimiter(relay.url, { commandTimeoutMs: 500, log: (line) => logged.push(line) });
      let closing: Promise<void> | null = null;
      try {
        await limiter.whenReady();
        await hold(limiter, relay);
        expect(relay.held).toBeGreaterThan(0);
        closing = limiter.close();
        // Before: the stop counted only months owed being sent, said nothing, and its QUIT waited ~5 s behind what was held.
        await until(() => logged.length > 0, 4_000);
        expect(logged).toEqual([`limits: stopping with units Redis did not take within 2000 ms: ${units} sent and never answered (Redis may have them)`]);
        const settled = await Promise.race([closing.then(() => 'stopped'), new Promise((resolve) => setTimeout(resolve, 1_000, 'waiting'))]);
        expect(settled).toBe('stopped');
      } finally {
        relay.close();
        await (closing ?? limiter.close());
      }
    });

    it('says in one line what it held when Redis stays away', async () => {
      const logged: string[] = [];
      const limiter = open(undefined, { closeSettleMs: 500, log: (line) => logged.push(line) });
      await limiter.whenReady();
      const [a, b] = [ownLimitRequest(1), ownLimitRequest(1)] as [LimitRequest, LimitRequest];
      for (const req of [a, b]) expect((await limiter.take(req)).granted).toBe(1);
      await stopped(limiter);
      expect((await limiter.take({ ...a, cost: 3 })).granted).toBe(3);
      expect((await limiter.take({ ...b, cost: 2 })).granted).toBe(2);
      await limiter.refund({ tokenId: b.tokenId, bucket: b.monthly.key, units: 1, nowMs: b.nowMs });
      try {
        await limiter.close();
        // Before: nothing said; the 5 calls were missing from Redis's months without a trace.
        expect(logged).toHaveLength(1);
        expect(logged[0]).toContain('4 counted in process and 0 given back, in 2 month counters');
      } finally {
        await server.start();
      }
    });
  });
});

/**
 * A TCP relay to a Redis on `port`: everything passes until `holdScripts`, from when the first
 * chunk carrying a script (EVAL, EVALSHA) and all after it on that connection are kept back.
 */
async function holdingRelay(port: number): Promise<{ url: string; holdScripts: boolean; held: number; close(): void }> {
  const sockets = new Set<Socket>();
  const relay = {
    url: '',
    holdScripts: false,
    held: 0,
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
  const server = createServer((client) => {
    const redis = connect(port, '127.0.0.1');
    for (const s of [client, redis]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        redis.destroy();
      });
    }
    let holding = false;
    client.on('data', (chunk: Buffer) => {
      if (!holding && relay.holdScripts && /eval/i.test(chunk.toString('latin1'))) holding = true;
      if (holding) relay.held++;
      else redis.write(chunk);
    });
    redis.on('data', (chunk: Buffer) => client.write(chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  relay.url = `redis://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return relay;
}
