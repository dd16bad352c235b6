/**
 * A chain call the gateway could not serve costs no quota: its nodes failed, refused, answered
 * garbage or hung up, or none was healthy (502 -32010). The limiter took the unit at admission;
 * it goes back, the usage record says `charged: false`, and the limiter, the account view and
 * the `X-MonthlyLimit-Remaining` of later calls agree (docs/decisions.md, "A call the gateway
 * failed to serve is not charged"). A 504 (a node worked on the call until the deadline) and an
 * answer over the size cap (the call's doing) stay charged. Through the whole service
 * (startTestApp, real HTTP and WebSocket) on the embedded default, and on Redis.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { quotaBucket } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { ownerOn } from '../support/planOwner.js';
import { accountUsage } from '../support/quotaCalls.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { listen, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

const MONTHLY = 5;
/** The chain's deadline: a node slower than this is a 504. */
const TIMEOUT_MS = 400;
/** More than the 64 MiB the gateway passes on of a node's answer. */
const OVERSIZED = `{"jsonrpc":"2.0","id":1,"result":"0x${'0'.repeat(65 * 1024 * 1024)}"}`;

const dir = mkdtempSync(join(tmpdir(), 'gw-quota-refund-'));
const plansFile = join(dir, 'plans.json');
writeFileSync(plansFile, JSON.stringify({ developer: { rps: 1000, monthly_requests: MONTHLY } }));
const chainsFile = join(dir, 'chains.json');
writeFileSync(
  chainsFile,
  JSON.stringify({
    chains: [
      { id: 'evm', name: 'EVM', protocol: 'jsonrpc', timeoutMs: TIMEOUT_MS, upstreams: [{ url: 'http://127.0.0.1:1' }] },
      // The same node with time to send 64 MiB on a loaded machine: its oversized answer is cut by the cap, not the deadline.
      { id: 'evmslow', name: 'EVM, patient', protocol: 'jsonrpc', timeoutMs: 30_000, upstreams: [{ url: 'http://127.0.0.1:1' }] },
    ],
  }),
);

let node: FakeUpstream;
let redis: TestRedisServer;

beforeAll(async () => {
  // A node that answers eth_getLogs with more than the gateway passes on, anything else with a block number.
  node = await startFake((call) => {
    const sent = JSON.parse(call.body) as { id?: unknown; method?: string } | Array<{ id?: unknown }>;
    if (Array.isArray(sent)) return { body: sent.map((s) => ({ jsonrpc: '2.0', id: s.id, result: '0x10' })) };
    if (sent.method === 'eth_getLogs') return { body: null, raw: OVERSIZED };
    return { body: { jsonrpc: '2.0', id: sent.id, result: '0x10' } };
  });
  node.delayMs = TIMEOUT_MS * 3;
  redis = await startTestRedisServer();
});
afterAll(async () => {
  await node?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Answered {
  status: number;
  remaining: string | null;
  body: unknown;
}

let nextId = 1;
async function post(url: string, body: unknown): Promise<Answered> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, remaining: res.headers.get('x-monthlylimit-remaining'), body: JSON.parse(await res.text()) as unknown };
}
const call = (url: string, method = 'eth_blockNumber') => post(url, { jsonrpc: '2.0', id: nextId++, method, params: [] });
const batch = (url: string, size: number) =>
  post(
    url,
    Array.from({ length: size }, () => ({ jsonrpc: '2.0', id: nextId++, method: 'eth_blockNumber', params: [] })),
  );

describe.each(['embedded', 'redis'] as const)('on the %s limiter', (backend) => {
  let t: TestApp;
  let base: string;
  let wsBase: string;
  beforeAll(async () => {
    const env: Record<string, string> = { CHAINS_CONFIG: chainsFile, PLANS_CONFIG: plansFile, UPSTREAM_EVM: node.url, UPSTREAM_EVMSLOW: node.url };
    if (backend === 'redis') env.REDIS_URL = redis.url;
    t = await startTestApp({ env });
    ({ url: base, wsBase } = await listen(t));
  });
  afterAll(async () => {
    node.mode = 'ok';
    await t?.close();
  });

  /** A new account on the plan (its own monthly bucket of MONTHLY) with one token. */
  async function account() {
    const o = await ownerOn(t, 'developer');
    const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'refund' } });
    expect(res.statusCode, res.body).toBe(201);
    const { id: tokenId, token } = res.json() as { id: string; token: string };
    // The token's creation reaches the gateway's cache through the change feed.
    await until(async () => (await call(`${base}/evm/${token}`)).status !== 401);
    return { o, tokenId, url: `${base}/evm/${token}`, wsUrl: `${wsBase}/evm/${token}` };
  }

  /** gateway_limiter_decisions_total by outcome. */
  async function decisions(): Promise<Record<string, number>> {
    const text = await (await fetch(`${base}/metrics`)).text();
    const found = [...text.matchAll(/^gateway_limiter_decisions_total\{outcome="(\w+)"\} (\d+)$/gm)];
    return Object.fromEntries(found.map((m) => [m[1] as string, Number(m[2])]));
  }

  /** The account's usage records once `count` are in the log. */
  async function records(accountId: string, count: number): Promise<UsageRecord[]> {
    await until(async () => (await recordedCalls(t.runtime.store, accountId)).length >= count, 15_000);
    return recordedCalls(t.runtime.store, accountId);
  }

  it('a 504 and an answer over the size cap stay charged', async () => {
    const a = await account();
    node.mode = 'slow';
    const slow = await call(a.url);
    node.mode = 'ok';
    expect([slow.status, slow.remaining]).toEqual([504, String(MONTHLY - 2)]);
    const oversized = await call(a.url.replace('/evm/', '/evmslow/'), 'eth_getLogs');
    expect(oversized.status).toBe(502);
    expect(JSON.stringify(oversized.body)).toContain('the most the gateway passes on');
    expect(oversized.remaining).toBe(String(MONTHLY - 3));
    await accountUsage(t, a.o.auth, { requests: 3, remaining: MONTHLY - 3 });
    const all = await records(a.o.accountId, 3);
    expect(all.map((r) => [r.status, r.charged])).toEqual([
      [200, true],
      [504, true],
      [502, true],
    ]);
  }, 20_000);

  it('a node outage costs no quota: every failed call and batch member goes back, then the month admits its MONTHLY calls', async () => {
    const a = await account();
    const before = await decisions();
    // The probe call that found the token known was served: the month starts at 1 used.
    const failed: Answered[] = [];
    node.mode = 'fail';
    failed.push(await call(a.url), await call(a.url));
    node.mode = 'hangup';
    failed.push(await call(a.url));
    // The node rests after three failures: "no healthy upstream" from here on, refunded alike.
    for (let i = 0; i < 7; i++) failed.push(await call(a.url));
    failed.push(await batch(a.url, 3), await batch(a.url, 3));
    // Over the WebSocket too: its calls go through the same path.
    const ws = await WsClient.open(a.wsUrl);
    const wsAnswers = [await ws.call('eth_blockNumber'), await ws.call('eth_blockNumber')];
    ws.close();
    expect(failed.map((f) => f.status)).toEqual(Array(12).fill(502));
    // Before: 4, 3, 2, 1, 0, then 429 for the rest of the month.
    expect(failed.map((f) => f.remaining)).toEqual(Array(12).fill(String(MONTHLY - 1)));
    expect(JSON.stringify(failed.slice(3, 10).map((f) => f.body))).toContain('no healthy upstream');
    expect(wsAnswers.map((w) => (w.error as { code: number }).code)).toEqual([-32010, -32010]);

    // The node is back (once its rest is over: until then 502s, refunded too).
    node.mode = 'ok';
    let first = await call(a.url);
    while (first.status === 502) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      first = await call(a.url);
    }
    expect([first.status, first.remaining]).toEqual([200, String(MONTHLY - 2)]);
    const rest: Answered[] = [];
    for (let i = 0; i < MONTHLY - 1; i++) rest.push(await call(a.url));
    expect(rest.map((r) => [r.status, r.remaining])).toEqual([
      [200, '2'],
      [200, '1'],
      [200, '0'],
      [429, '0'],
    ]);

    const served = 1 + MONTHLY - 1;
    // The metrics say so too: admitted less refunded is what the month keeps.
    const after = await decisions();
    const delta = (outcome: string) => (after[outcome] ?? 0) - (before[outcome] ?? 0);
    expect(delta('refunded')).toBeGreaterThanOrEqual(10 + 6 + 2);
    expect(delta('admitted') - delta('refunded')).toBe(served - 1);
    await accountUsage(t, a.o.auth, { requests: served, remaining: 0 });
    const all = await records(a.o.accountId, served + 10 + 6 + 2);
    const failures = all.filter((r) => r.status === 502 || r.rpcErrorCode === -32010);
    expect(failures.length).toBeGreaterThanOrEqual(10 + 6 + 2);
    expect(failures.every((r) => r.charged === false)).toBe(true);
    expect(all.filter((r) => r.charged === true)).toHaveLength(served);

    if (backend === 'redis') {
      // Redis's month holds the served calls only, once this gateway's leases are given back.
      const direct = new RedisLimiter(redis.url, { commandTimeoutMs: 1000 });
      try {
        await direct.whenReady();
        await eventually(
          () => direct.monthlyUsed(quotaBucket.account(a.o.accountId), Date.now()),
          (n) => n === served,
          5_000,
        );
      } finally {
        await direct.close();
      }
    }
  }, 30_000);
});
