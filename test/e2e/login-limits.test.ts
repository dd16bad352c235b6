import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, inject as provided } from 'vitest';
import { startTestApp, type TestApp } from '../support/testApp.js';

/** Log-in and sign-up limits through the API, with the defaults (10 failures / 15 min, 20 sign-ups / hour). */
let t: TestApp;
let nowMs = Date.UTC(2025, 5, 1, 12, 0, 0);
beforeAll(async () => {
  // The shipped sign-up limit (the test harness raises it for every other file).
  t = await startTestApp({ now: () => new Date(nowMs), env: { SIGNUP_MAX_PER_ADDRESS: '20' } });
});
afterAll(() => t.close());

const PASSWORD = 'correct horse battery';
let made = 0;
const nextNumber = (): number => {
  made += 1;
  return made;
};
const unique = (prefix: string) => `${prefix}-${nextNumber()}@example.com`;
/** An address of its own per test, so the per-address counts never mix. */
const address = () => {
  const n = nextNumber();
  return `10.0.${Math.floor(n / 256)}.${n % 256}`;
};

const inject = (options: InjectOptions) => t.app.inject(options);
const signUp = (email: string, remoteAddress = address()) =>
  inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password: PASSWORD }, remoteAddress });
const logIn = (email: string, password: string, remoteAddress: string) =>
  inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password }, remoteAddress });

async function account(): Promise<string> {
  const email = unique('owner');
  expect((await signUp(email)).statusCode).toBe(201);
  return email;
}

describe('failed log-ins per email', () => {
  it('the 11th within 15 minutes is a 429 too_many_attempts with Retry-After; the right password is refused too until the window ends', async () => {
    const email = await account();
    const started = nowMs;
    // Each failure from another address: the email's own count locks it.
    for (let i = 0; i < 10; i++) expect((await logIn(email, 'not the password', address())).statusCode).toBe(401);

    nowMs = started + 60_000;
    const refused = await logIn(email, 'not the password', address());
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('840');
    expect(refused.headers['content-type']).toContain('application/problem+json');
    expect(refused.json()).toMatchObject({ type: '/problems/too_many_attempts', status: 429, code: 'too_many_attempts', retryAfterSeconds: 840 });

    const right = await logIn(email, PASSWORD, address());
    expect(right.statusCode).toBe(429);
    expect(right.headers['set-cookie']).toBeUndefined();

    nowMs = started + 15 * 60_000;
    expect((await logIn(email, PASSWORD, address())).statusCode).toBe(200);
  });

  it('lets no more than 10 through when the attempts arrive together', async () => {
    const email = await account();
    const answers = await Promise.all(Array.from({ length: 15 }, () => logIn(email, 'not the password', address())));
    expect(answers.filter((r) => r.statusCode === 401)).toHaveLength(10);
    expect(answers.filter((r) => r.statusCode === 429)).toHaveLength(5);
  });

  it('locks an unknown email as it locks a known one (the answers do not tell which exists)', async () => {
    const email = unique('nobody');
    for (let i = 0; i < 10; i++) expect((await logIn(email, 'not the password', address())).statusCode).toBe(401);
    expect((await logIn(email, 'not the password', address())).statusCode).toBe(429);
  });

  it('a successful log-in clears the email’s failures', async () => {
    const email = await account();
    const from = address();
    for (let i = 0; i < 9; i++) expect((await logIn(email, 'not the password', from)).statusCode).toBe(401);
    expect((await logIn(email, PASSWORD, address())).statusCode).toBe(200);
    // Ten more failures, not one: the count started again.
    for (let i = 0; i < 10; i++) expect((await logIn(email, 'not the password', address())).statusCode).toBe(401);
    expect((await logIn(email, PASSWORD, address())).statusCode).toBe(429);
  });
});

describe('failed log-ins per client address', () => {
  it('10 failures over different emails lock the address, even for an account’s right password; another address still logs in', async () => {
    const email = await account();
    const attacker = address();
    for (let i = 0; i < 10; i++) expect((await logIn(unique('guess'), 'not the password', attacker)).statusCode).toBe(401);
    const refused = await logIn(email, PASSWORD, attacker);
    expect(refused.statusCode).toBe(429);
    expect(refused.json().code).toBe('too_many_attempts');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect((await logIn(email, PASSWORD, address())).statusCode).toBe(200);
  });

  it('does not count successful log-ins', async () => {
    const office = address();
    for (const email of [await account(), await account(), await account()]) {
      for (let i = 0; i < 5; i++) expect((await logIn(email, PASSWORD, office)).statusCode).toBe(200);
    }
    for (let i = 0; i < 10; i++) expect((await logIn(unique('guess'), 'not the password', office)).statusCode).toBe(401);
    expect((await logIn(unique('guess'), 'not the password', office)).statusCode).toBe(429);
  });

  it('counts an IPv6 client by its /64', async () => {
    for (let i = 0; i < 10; i++) expect((await logIn(unique('guess'), 'not the password', `2001:db8:1:2::${i + 1}`)).statusCode).toBe(401);
    expect((await logIn(unique('guess'), 'not the password', '2001:db8:1:2:ffff::1')).statusCode).toBe(429);
    expect((await logIn(unique('guess'), 'not the password', '2001:db8:1:3::1')).statusCode).toBe(401);
  });
});

describe('behind a proxy (TRUST_PROXY=true)', () => {
  it('counts the address the proxy added, not one the client wrote into X-Forwarded-For', async () => {
    const proxied = await startTestApp({ now: () => new Date(nowMs), env: { TRUST_PROXY: 'true', SIGNUP_MAX_PER_ADDRESS: '20' } });
    try {
      // nginx's $proxy_add_x_forwarded_for appends the address it saw to whatever the client sent.
      const viaProxy = (spoofed: string, email: string) =>
        proxied.app.inject({
          method: 'POST',
          url: '/api/v1/auth/login',
          payload: { email, password: 'not the password' },
          remoteAddress: '127.0.0.1',
          headers: { 'x-forwarded-for': `${spoofed}, 198.51.100.7` },
        });
      for (let i = 0; i < 10; i++) expect((await viaProxy(address(), unique('guess'))).statusCode).toBe(401);
      const refused = await viaProxy(address(), unique('guess'));
      expect(refused.statusCode).toBe(429);
      expect(refused.json().code).toBe('too_many_attempts');
    } finally {
      await proxied.close();
    }
  });
});

describe('sign-ups per client address', () => {
  it('the 21st within an hour from one address is a 429 with Retry-After; another address still signs up', async () => {
    const from = address();
    for (let i = 0; i < 20; i++) expect((await signUp(unique('many'), from)).statusCode).toBe(201);
    const refused = await signUp(unique('many'), from);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('3600');
    expect(refused.json()).toMatchObject({ code: 'too_many_attempts', status: 429 });
    expect((await signUp(unique('many'), address())).statusCode).toBe(201);
  });

  it('counts sign-ups refused as taken (they tell that an account exists)', async () => {
    const from = address();
    const email = unique('taken');
    expect((await signUp(email, from)).statusCode).toBe(201);
    for (let i = 0; i < 19; i++) expect((await signUp(email, from)).statusCode).toBe(409);
    expect((await signUp(email, from)).statusCode).toBe(429);
  });
});

describe('with Redis, API instances count together', () => {
  it('failures at one instance lock the email at the other', async () => {
    const env = { REDIS_URL: provided('redisUrl'), UPSTREAM_LOCAL: 'http://127.0.0.1:9' };
    const [a, b] = await Promise.all([startTestApp({ env }), startTestApp({ env })]);
    try {
      const email = unique('shared');
      for (let i = 0; i < 10; i++) {
        const res = await a.app.inject({
          method: 'POST',
          url: '/api/v1/auth/login',
          payload: { email, password: 'not the password' },
          remoteAddress: address(),
        });
        expect(res.statusCode).toBe(401);
      }
      const refused = await b.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email, password: 'not the password' },
        remoteAddress: address(),
      });
      expect(refused.statusCode).toBe(429);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(800);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
