import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getHeapSnapshot } from 'node:v8';
import type { InjectOptions } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SESSION_SWEEP_BATCH } from '../../src/commands/api/sessions.js';
import { MemoryAttemptCounter, RedisAttemptCounter } from '../../src/infra/attempts/index.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * What the service keeps as traffic goes by, found by bench/soak.ts (a service driven for minutes
 * with a varied workload, its heap diffed): structures that grew with every request and were not
 * a bounded cache. Each test drives the traffic and counts what is left behind.
 */
const PASSWORD = 'correct horse battery';
const DAY_MS = 86_400_000;

/** An EVM node: its head and final blocks for the gateway's head tracking, a balance for any account. */
const HEAD = 0x1000000;
function startNode(): Promise<Server> {
  const block = (n: number) => ({
    number: `0x${n.toString(16)}`,
    hash: `0x${n.toString(16).padStart(64, '0')}`,
    parentHash: `0x${(n - 1).toString(16).padStart(64, '0')}`,
    timestamp: '0x6553f100',
    transactions: [],
  });
  const answer = (call: { id?: unknown; method?: string; params?: unknown[] }) => {
    const tag = call.params?.[0];
    const result =
      call.method === 'eth_getBlockByNumber'
        ? block(tag === 'finalized' || tag === 'safe' ? HEAD - 64 : HEAD)
        : call.method === 'eth_chainId'
          ? '0x1'
          : `0x${'ab'.repeat(16)}`;
    return { jsonrpc: '2.0', id: call.id ?? null, result };
  };
  /** A balance's answer, padded as a big answer is: what the gateway keeps of it is the result alone. */
  const padded = (call: { id?: unknown }) =>
    `{"node":"soak-answer","jsonrpc":"2.0","id":${JSON.stringify(call.id ?? null)},"result":"0x${'ab'.repeat(16)}"}${' '.repeat(200_000)}`;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: unknown; method?: string; params?: unknown[] };
      const out = Array.isArray(body)
        ? JSON.stringify(body.map(answer))
        : body.method === 'eth_getBalance'
          ? padded(body)
          : JSON.stringify(answer(body as Parameters<typeof answer>[0]));
      res.writeHead(200, { 'content-type': 'application/json' }).end(out);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

let t: TestApp;
let node: Server;
/** The service's clock, moved by the tests: sessions last 7 days. */
let offsetMs = 0;
beforeAll(async () => {
  node = await startNode();
  const dir = mkdtempSync(join(tmpdir(), 'soak-bounds-'));
  const chains = join(dir, 'chains.json');
  const url = `http://127.0.0.1:${(node.address() as AddressInfo).port}`;
  writeFileSync(
    chains,
    JSON.stringify({ chains: [{ id: 'eth', name: 'Ethereum', protocol: 'jsonrpc', upstreams: [{ url, label: 'node' }], headPollMs: 200 }] }),
  );
  t = await startTestApp({ now: () => new Date(Date.now() + offsetMs), env: { CHAINS_CONFIG: chains } });
});
afterAll(async () => {
  await t.close();
  node.close();
});

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

/** Strings of 100 KB or more alive in this process (after the full collection a heap snapshot starts with) that begin with `prefix`. */
async function bigStringsAlive(prefix: string): Promise<number> {
  const chunks: string[] = [];
  for await (const chunk of getHeapSnapshot()) chunks.push(String(chunk));
  const snap = JSON.parse(chunks.join('')) as { snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }; nodes: number[]; strings: string[] };
  const { node_fields: fields, node_types: types } = snap.snapshot.meta;
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const stringType = types[0].indexOf('string');
  let alive = 0;
  for (let i = 0; i < snap.nodes.length; i += width) {
    if (snap.nodes[i + typeAt] !== stringType || (snap.nodes[i + sizeAt] as number) < 100_000) continue;
    if ((snap.strings[snap.nodes[i + nameAt] as number] as string).startsWith(prefix)) alive++;
  }
  return alive;
}

describe('response cache', () => {
  it('keeps its own copy of each key and answer, not the request body and node answer they were cut from', async () => {
    const { url } = await listen(t);
    const { token } = await newToken(t, { plan: 'unlimited' });
    const cache = t.runtime.gateway?.pools.cache;
    if (!cache) throw new Error('expected a response cache');
    // Reads at a final block, each of another account: each answer is kept. Each request is
    // padded to 200 KB, as a batch member beside a big one is (or a client's whitespace), and so
    // is each of the node's answers.
    const marker = `{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x5a5a`;
    const call = (i: number) =>
      fetch(`${url}/eth/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `${marker}${i.toString(16).padStart(36, '0')}","0x10"]}${' '.repeat(200_000)}`,
      });
    // Once the gateway knows the final block, the answer is kept.
    for (let i = 0; cache.size === 0 && i < 100; i++) {
      const res = await call(-1 >>> 0);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      await new Promise((r) => setTimeout(r, 50));
    }
    const before = cache.size;
    for (let i = 0; i < 20; i++) {
      const res = await call(i);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: 1, result: `0x${'ab'.repeat(16)}` });
    }
    expect(cache.size).toBe(before + 20);
    // Before: every one of the 20 request bodies (and the first calls') stayed alive behind its
    // entry's key, and every answer of the node behind its entry's result. Now: the last call's
    // at most, wherever this process (the client too) still holds it.
    expect(await bigStringsAlive(marker)).toBeLessThanOrEqual(1);
    expect(await bigStringsAlive('{"node":"soak-answer"')).toBeLessThanOrEqual(1);
  });
});
