import { randomUUID } from 'node:crypto';
import type { InjectOptions } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SESSION_SWEEP_BATCH } from '../../src/commands/api/sessions.js';
import { MemoryAttemptCounter, RedisAttemptCounter } from '../../src/infra/attempts/index.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * What the service keeps as traffic goes by, found by bench/soak.ts (a service driven for minutes
 * with a varied workload, its heap diffed): structures that grew with every request and were not
 * a bounded cache. Each test drives the traffic and counts what is left behind.
 */
const PASSWORD = 'correct horse battery';
const DAY_MS = 86_400_000;

let t: TestApp;
/** The service's clock, moved by the tests: sessions last 7 days. */
let offsetMs = 0;
beforeAll(async () => {
  t = await startTestApp({ now: () => new Date(Date.now() + offsetMs) });
});
afterAll(() => t.close());

let addresses = 0;
/** An address of its own per use. */
const address = () => {
  addresses += 1;
  return `10.77.${Math.floor(addresses / 256)}.${addresses % 256}`;
};
const api = (options: InjectOptions) => t.app.inject({ remoteAddress: address(), ...options });
const logIn = (email: string, password = PASSWORD, remoteAddress = address()) =>
  t.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password }, remoteAddress });
const cookieOf = (res: { headers: Record<string, unknown> }) => String(res.headers['set-cookie']).split(';')[0] as string;

/** The in-process attempt counter behind the service's log-in and sign-up limits. */
function attemptWindows(): number {
  const counter = (t.runtime.api.authThrottle as unknown as { attempts: unknown }).attempts;
  if (!(counter instanceof MemoryAttemptCounter)) throw new Error('expected the embedded default: attempts counted in process');
  return counter.size;
}

const storedSessions = async () => (await t.runtime.readModels.range('sessions')).length;

describe('log-in attempt windows', () => {
  it('a log-in that succeeds, or is refused for a full hashing queue, leaves no window behind', async () => {
    const email = `soak-${randomUUID()}@example.com`;
    expect((await api({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password: PASSWORD } })).statusCode).toBe(201);
    const afterSignUp = attemptWindows();

    // Successful log-ins, each from an address of its own: nothing counted, nothing kept.
    for (let i = 0; i < 30; i++) expect((await logIn(email)).statusCode).toBe(200);
    expect(attemptWindows()).toBe(afterSignUp);

    // A flood of log-ins with emails that do not exist, 10 at once from each of 20 addresses: more
    // than the hashing queue holds (64 waiting), so most are refused at once with 503.
    const flood = await Promise.all(
      Array.from({ length: 20 }, () => address()).flatMap((from) =>
        Array.from({ length: 10 }, () => logIn(`nobody-${randomUUID()}@example.com`, 'wrong password', from)),
      ),
    );
    const statuses = flood.map((res) => res.statusCode);
    const unauthorized = statuses.filter((s) => s === 401).length;
    expect(statuses.filter((s) => s === 503).length).toBeGreaterThan(50);
    expect(statuses.every((s) => s === 401 || s === 503)).toBe(true);
    // What a failure counts stays (its email's window, and its address's: 20 at most); a refusal
    // for the queue counted nothing and keeps nothing. Before: a window per email and address of
    // every request, 200 more, for the whole 15 minutes.
    expect(attemptWindows()).toBeLessThanOrEqual(afterSignUp + 20 + unauthorized);
  });

  it('Redis: a window given back to nothing is deleted, one still counting is kept', async () => {
    const counter = new RedisAttemptCounter(inject('redisUrl'), { commandTimeoutMs: 2000 });
    const raw = new Redis(inject('redisUrl'));
    try {
      await counter.whenReady();
      const rule = { limit: 5, windowMs: 60_000 };
      const now = Date.now();
      const given = `soak:${randomUUID()}`;
      await counter.take(given, rule, now);
      await counter.giveBack(given, now);
      expect(await raw.exists(`attempts:${given}`)).toBe(0);

      const counting = `soak:${randomUUID()}`;
      await counter.take(counting, rule, now);
      await counter.take(counting, rule, now);
      await counter.giveBack(counting, now);
      expect(await raw.exists(`attempts:${counting}`)).toBe(1);
      expect(await raw.hget(`attempts:${counting}`, 'n')).toBe('1');
    } finally {
      await counter.close();
      raw.disconnect();
    }
  });
});

describe('dashboard sessions', () => {
  it('expired sessions are deleted as new ones open; live ones stay and still log in', async () => {
    const email = `sessions-${randomUUID()}@example.com`;
    expect((await api({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password: PASSWORD } })).statusCode).toBe(201);
    // Browsers that log in and never log out (the tab closed): each leaves its session.
    for (let i = 0; i < 40; i++) expect((await logIn(email)).statusCode).toBe(200);
    const before = await storedSessions();
    expect(before).toBeGreaterThanOrEqual(41);

    // Five days on, one more: still live two days later.
    offsetMs += 5 * DAY_MS;
    const recent = cookieOf(await logIn(email));
    // Three days more: the first 41 (and the earlier tests') have expired.
    offsetMs += 3 * DAY_MS;
    const fresh = cookieOf(await logIn(email));
    // Every expired one is gone within a pass of the sweep over what is stored.
    for (let i = 0; i * SESSION_SWEEP_BATCH < before; i++) expect((await logIn(email)).statusCode).toBe(200);
    const left = await storedSessions();
    expect(left).toBeLessThanOrEqual(2 + Math.ceil(before / SESSION_SWEEP_BATCH));
    for (const cookie of [recent, fresh]) expect((await api({ method: 'GET', url: '/api/v1/account', headers: { cookie } })).statusCode).toBe(200);
  });
});
