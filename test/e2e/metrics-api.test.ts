import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream, usedQuota } from '../../src/domain/usage.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { rebuildProjections } from '../../src/projections/rebuild.js';
import { usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

let node: GanacheNode;
let t: TestApp;
const scratch: string[] = [];

beforeAll(async () => {
  node = await startGanache();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url } });
});
afterAll(async () => {
  await t?.close();
  await node?.close();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

const inject = (options: InjectOptions) => t.app.inject(options);
const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const iso = (ms: number) => new Date(ms).toISOString();

async function createToken(auth: Record<string, string>, name: string): Promise<{ id: string; token: string }> {
  const res = await inject({ method: 'POST', url: '/api/v1/tokens', headers: auth, payload: { name } });
  expect(res.statusCode).toBe(201);
  return res.json();
}

/** Appends usage as the ingester would, then waits until the projections have it. */
async function appendUsage(records: UsageRecord[]): Promise<void> {
  for (const accountId of new Set(records.map((r) => r.accountId))) {
    const mine = records.filter((r) => r.accountId === accountId);
    await t.runtime.store.append(
      usageStream(accountId),
      mine.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } })),
      'any',
    );
  }
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

const metrics = (headers: Record<string, string>, query = '') => inject({ method: 'GET', url: `/api/v1/metrics/user${query}`, headers });

describe('metrics from a known mix of usage', () => {
  let o: Awaited<ReturnType<typeof owner>>;
  let tokA: { id: string; token: string };
  let tokB: { id: string; token: string };
  let base: number;
  let records: UsageRecord[];

  beforeAll(async () => {
    o = await owner(t.app);
    await inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'developer' },
    });
    tokA = await createToken(o.auth, 'backend');
    tokB = await createToken(o.auth, 'frontend');
    base = Math.floor(Date.now() / HOUR) * HOUR - 3 * HOUR;
    let n = 0;
    const rec = (at: number, r: Partial<UsageRecord>): UsageRecord => ({
      requestId: `mix-${o.accountId}-${n++}`,
      at: iso(at),
      accountId: o.accountId,
      tokenId: tokA.id,
      chain: 'eth',
      method: 'eth_blockNumber',
      status: 200,
      rpcErrorCode: null,
      errorMessage: null,
      totalMs: 8,
      upstreamMs: 5,
      clientIp: '192.0.2.1',
      upstream: 'eth-1',
      ...r,
    });
    records = [
      // 6 successes in (7, 10] ms, two client IPs; two answered from the cache, one sharing another's call.
      ...Array.from({ length: 6 }, (_, i) =>
        rec(base + 5 * MIN + i * 1000, { clientIp: i < 4 ? '192.0.2.1' : '192.0.2.2', cache: i < 2 ? 'hit' : i === 2 ? 'coalesced' : 'miss' }),
      ),
      // 2 JSON-RPC errors from the node (HTTP 200), in (30, 50] ms, one hedged.
      ...Array.from({ length: 2 }, (_, i) =>
        rec(base + 65 * MIN + i * 1000, {
          method: 'eth_call',
          rpcErrorCode: 3,
          errorMessage: 'execution reverted',
          totalMs: 40,
          upstreamMs: 35,
          cache: i === 0 ? 'hedged' : 'miss',
        }),
      ),
      // A REST success in (200, 300] ms and a REST 429 that never reached a node.
      rec(base + 125 * MIN, {
        tokenId: tokB.id,
        chain: 'sol',
        method: 'getBlockHeight',
        totalMs: 250,
        upstreamMs: 240,
        clientIp: '198.51.100.7',
        upstream: 'sol-1',
      }),
      rec(base + 126 * MIN + 500, {
        tokenId: tokB.id,
        chain: 'sol',
        method: 'getBlockHeight',
        status: 429,
        errorMessage: 'Rate limit exceeded',
        totalMs: 1,
        upstreamMs: null,
        clientIp: '198.51.100.7',
        upstream: null,
      }),
      // 16 days back: inside Developer's 30 days, outside a 3-hour window.
      rec(base - 16 * DAY + 30 * MIN, {}),
    ];
    await appendUsage(records);
  });

  it('answers the exact totals, rates, breakdowns, series, errors and limits (API token as Bearer)', async () => {
    const res = await metrics({ authorization: `Bearer ${tokA.token}` }, `?start=${iso(base)}&end=${iso(base + 3 * HOUR)}`);
    expect(res.statusCode).toBe(200);
    const m = res.json();
    expect(m.period).toEqual({ start: iso(base), end: iso(base + 3 * HOUR) });
    expect(m.chain).toBeNull();
    expect(m.granularity).toBe('minute');
    expect(m.retention).toMatchObject({ retentionDays: 30, clamped: false });
    // 10 calls: 7 successes, 3 errors; total ms 6·8 + 2·40 + 250 + 1 = 379; node ms 6·5 + 2·35 + 240 = 340 over 9 calls.
    expect(m.totals).toEqual({
      requests: 10,
      success: 7,
      errors: 3,
      successRate: 70,
      errorRate: 30,
      avgResponseMs: 37.9,
      avgNodeLatencyMs: 37.78,
      cacheHits: 2,
      coalesced: 1,
      hedged: 1,
      // Histogram: 1 in (0,1], 6 in (7,10], 2 in (30,50], 1 in (200,300]: p50 at rank 5 → 7 + 3·4/6; p95 at rank 9.5 → 250; p99 at 9.9 → 290.
      p50ResponseMs: 9,
      p95ResponseMs: 250,
      p99ResponseMs: 290,
    });
    expect(m.byChain).toEqual([
      expect.objectContaining({ chain: 'eth', requests: 8, success: 6, errors: 2, errorRate: 25, avgResponseMs: 16, avgNodeLatencyMs: 12.5 }),
      expect.objectContaining({ chain: 'sol', requests: 2, success: 1, errors: 1, errorRate: 50, avgResponseMs: 125.5, avgNodeLatencyMs: 240 }),
    ]);
    const methods = Object.fromEntries(m.byMethod.map((x: { chain: string; method: string }) => [`${x.chain}:${x.method}`, x]));
    expect(Object.keys(methods).sort()).toEqual(['eth:eth_blockNumber', 'eth:eth_call', 'sol:getBlockHeight']);
    expect(m.byMethod[0]).toMatchObject({
      chain: 'eth',
      method: 'eth_blockNumber',
      requests: 6,
      errors: 0,
      successRate: 100,
      avgResponseMs: 8,
      cacheHits: 2,
      coalesced: 1,
      hedged: 0,
    });
    expect(methods['eth:eth_call']).toMatchObject({ requests: 2, errors: 2, errorRate: 100, avgResponseMs: 40 });
    expect(methods['sol:getBlockHeight']).toMatchObject({ requests: 2, errors: 1, avgResponseMs: 125.5 });
    expect(m.byToken).toEqual([expect.objectContaining({ tokenId: tokA.id, requests: 8 }), expect.objectContaining({ tokenId: tokB.id, requests: 2 })]);

    expect(m.series).toHaveLength(180);
    const nonZero = m.series.filter((p: { requests: number }) => p.requests > 0);
    expect(nonZero).toEqual([
      { t: iso(base + 5 * MIN), requests: 6, errors: 0, avgResponseMs: 8 },
      { t: iso(base + 65 * MIN), requests: 2, errors: 2, avgResponseMs: 40 },
      { t: iso(base + 125 * MIN), requests: 1, errors: 0, avgResponseMs: 250 },
      { t: iso(base + 126 * MIN), requests: 1, errors: 1, avgResponseMs: 1 },
    ]);
    expect(m.series[0]).toEqual({ t: iso(base), requests: 0, errors: 0, avgResponseMs: null });

    expect(m.errors).toEqual([
      { code: 3, message: 'execution reverted', chain: 'eth', method: 'eth_call', count: 2, lastSeen: iso(base + 65 * MIN + 1000) },
      { code: 429, message: 'Rate limit exceeded', chain: 'sol', method: 'getBlockHeight', count: 1, lastSeen: iso(base + 126 * MIN + 500) },
    ]);
    expect(m.recentErrors.map((e: { at: string; code: number }) => [e.at, e.code])).toEqual([
      [iso(base + 126 * MIN + 500), 429],
      [iso(base + 65 * MIN + 1000), 3],
      [iso(base + 65 * MIN), 3],
    ]);
    const month = new Date().toISOString().slice(0, 7);
    // Quota used: the REST 429 the limiter refused is a request and an error above, not quota.
    const used = records.filter((r) => r.at.startsWith(month) && usedQuota(r)).length;
    expect(m.limits).toEqual({
      monthlyLimit: 5_000_000,
      used,
      remaining: 5_000_000 - used,
      resetsAt: new Date(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth() + 1, 1)).toISOString(),
    });
  });

  it('filters by chain, alone or with start and end', async () => {
    const sol = (await metrics(o.auth, `?chain=sol&start=${iso(base)}&end=${iso(base + 3 * HOUR)}`)).json();
    expect(sol.chain).toBe('sol');
    expect(sol.totals).toMatchObject({ requests: 2, errors: 1, errorRate: 50 });
    expect(sol.byChain.map((c: { chain: string }) => c.chain)).toEqual(['sol']);
    expect(sol.errors).toEqual([expect.objectContaining({ chain: 'sol', count: 1 })]);
    const ethAll = (await metrics(o.auth, '?chain=eth')).json();
    expect(ethAll.totals).toMatchObject({ requests: 9, errors: 2 });
    expect((await metrics(o.auth, '?chain=bsc')).json().totals).toMatchObject({ requests: 0, successRate: null, avgResponseMs: null, p95ResponseMs: null });
  });

  it("filters by method, alone or with a chain (the dashboard's method filter)", async () => {
    const window = `start=${iso(base)}&end=${iso(base + 3 * HOUR)}`;
    const calls = (await metrics(o.auth, `?method=eth_call&${window}`)).json();
    expect(calls.totals).toMatchObject({ requests: 2, errors: 2 });
    expect(calls.byMethod.map((m: { method: string }) => m.method)).toEqual(['eth_call']);
    expect(calls.errors).toEqual([expect.objectContaining({ method: 'eth_call', count: 2 })]);
    const blocks = (await metrics(o.auth, `?method=eth_blockNumber&chain=eth&${window}`)).json();
    expect(blocks.totals).toMatchObject({ requests: 6, errors: 0 });
    expect((await metrics(o.auth, `?method=eth_blockNumber&chain=sol&${window}`)).json().totals.requests).toBe(0);
  });

  it('without parameters covers the whole retention window', async () => {
    const m = (await metrics({ cookie: o.cookie })).json();
    expect(m.totals.requests).toBe(11);
    expect(m.granularity).toBe('day');
    expect(Date.parse(m.period.end) - Date.parse(m.period.start)).toBeGreaterThanOrEqual(30 * DAY);
    expect(m.retention).toMatchObject({ retentionDays: 30, clamped: false });
  });

  it('counts exactly over the period it reports: whole minutes, whole hours for a day series', async () => {
    const from = (ms: number, to: number) => metrics(o.auth, `?start=${iso(ms)}&end=${iso(to)}`).then((r) => r.json());
    // Over 14 days: a day series over whole hours (days inside, hours at the ends). The 16-day-old call is 30 minutes into its hour.
    const withOld = await from(base - 16 * DAY + 30 * MIN, base + 126 * MIN);
    expect(withOld.granularity).toBe('day');
    expect(withOld.period).toEqual({ start: iso(base - 16 * DAY), end: iso(base + 3 * HOUR) });
    expect(withOld.totals).toMatchObject({ requests: 11, errors: 3 });
    expect((await from(base - 16 * DAY + 61 * MIN, base + 126 * MIN)).totals.requests).toBe(10);
    expect((await from(base - 16 * DAY + 61 * MIN, base + 2 * HOUR)).totals).toMatchObject({ requests: 8, errors: 2 });
    // An hour series over 8 hours counts whole minutes: days are never used, minutes at the ends.
    const hourly = await from(base + 6 * MIN, base + 8 * HOUR);
    expect(hourly.granularity).toBe('hour');
    expect(hourly.period.start).toBe(iso(base + 6 * MIN));
    expect(hourly.totals.requests).toBe(4);
    expect(hourly.series.filter((p: { requests: number }) => p.requests > 0).map((p: { t: string; requests: number }) => [p.t, p.requests])).toEqual([
      [iso(base + HOUR), 2],
      [iso(base + 2 * HOUR), 2],
    ]);
    // 127 minutes reach the 429 at 126:00.5 (end rounds up to the minute); 126 do not.
    expect((await from(base + 6 * MIN, base + 126 * MIN)).totals.requests).toBe(3);
    expect((await from(base + 6 * MIN, base + 126 * MIN + 1)).totals).toMatchObject({ requests: 4, errors: 3 });
  });

  it('clamps a start older than the retention and says so', async () => {
    const m = (await metrics(o.auth, '?start=2001-01-01T00:00:00Z')).json();
    expect(m.retention).toMatchObject({ retentionDays: 30, clamped: true });
    expect(Date.parse(m.period.start)).toBeGreaterThan(Date.now() - 30 * DAY - 2 * MIN);
    expect(m.totals.requests).toBe(11);
  });

  it("shows one token's analytics with its client IPs; 404 for another account's token", async () => {
    const res = await inject({ method: 'GET', url: `/api/v1/metrics/tokens/${tokA.id}?start=${iso(base)}&end=${iso(base + 3 * HOUR)}`, headers: o.auth });
    expect(res.statusCode).toBe(200);
    const a = res.json();
    expect(a.token).toMatchObject({ id: tokA.id, name: 'backend', status: 'active' });
    expect(a.totals).toMatchObject({ requests: 8, success: 6, errors: 2, successRate: 75, errorRate: 25, avgResponseMs: 16 });
    expect(a.byChain).toEqual([expect.objectContaining({ chain: 'eth', requests: 8 })]);
    expect(a.clientIps).toEqual([
      { ip: '192.0.2.1', count: 6, lastSeen: iso(base + 65 * MIN + 1000) },
      { ip: '192.0.2.2', count: 2, lastSeen: iso(base + 5 * MIN + 5000) },
    ]);
    expect(a.recentErrors).toHaveLength(2);
    expect(a.limits).toMatchObject({ appliesTo: 'account', monthlyLimit: 5_000_000 });
    const b = (await inject({ method: 'GET', url: `/api/v1/metrics/tokens/${tokB.id}`, headers: { cookie: o.cookie } })).json();
    expect(b.totals).toMatchObject({ requests: 2, errors: 1 });
    expect(b.clientIps).toEqual([{ ip: '198.51.100.7', count: 2, lastSeen: iso(base + 126 * MIN + 500) }]);

    const stranger = await owner(t.app);
    expect((await inject({ method: 'GET', url: `/api/v1/metrics/tokens/${tokA.id}`, headers: stranger.auth })).statusCode).toBe(404);
    expect((await inject({ method: 'GET', url: '/api/v1/metrics/tokens/not-an-id', headers: o.auth })).statusCode).toBe(400);
    // Token analytics are for the owner's dashboard, not for an API token.
    expect((await inject({ method: 'GET', url: `/api/v1/metrics/tokens/${tokA.id}`, headers: { authorization: `Bearer ${tokA.token}` } })).statusCode).toBe(
      401,
    );
  });

  it('a rebuild from the log equals the live read models, and replaying twice changes nothing', async () => {
    const collections = usageMetricsProjection.collections;
    const dump = async (rm: ReadModelStore) => Object.fromEntries(await Promise.all(collections.map(async (c) => [c, await rm.range(c)] as const)));
    const head = await t.runtime.store.headPosition();
    if (head) await t.runtime.projector?.waitFor(head);
    const live = await dump(t.runtime.readModels);
    expect(live.usage_rollups?.length).toBeGreaterThan(10);
    const dir = mkdtempSync(join(tmpdir(), 'gw-usage-rebuild-'));
    scratch.push(dir);
    const rm = await LevelReadModelStore.open(dir);
    try {
      await rebuildProjections(t.runtime.store, rm, [usageMetricsProjection]);
      expect(await dump(rm)).toEqual(live);
      const sub = t.runtime.store.subscribeToAll();
      for await (const item of sub) {
        if (item.kind === 'caughtUp') break;
        await rm.commit(usageMetricsProjection.name, item.event.position, usageMetricsProjection.project(item.event));
      }
      await sub.close();
      expect(await dump(rm)).toEqual(live);
    } finally {
      await rm.close();
    }
  });
});

describe('metrics of calls served by the gateway', () => {
  it('shows a served call within 5 s, and counts a real mix of successes and errors exactly', async () => {
    const o = await owner(t.app);
    // Developer's 25 requests per second: none of these calls is refused by the rate limit.
    await inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'developer' },
    });
    const { token } = await createToken(o.auth, 'live');
    const rpc = (payload: unknown) =>
      inject({ method: 'POST', url: `/local/${token}`, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });
    const started = Date.now();
    expect((await rpc({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber' })).statusCode).toBe(200);
    let seen = 0;
    while (Date.now() - started < 5000) {
      seen = (await metrics(o.auth)).json().totals.requests;
      if (seen === 1) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(seen).toBe(1);
    expect(Date.now() - started).toBeLessThan(5000);

    // Two more successes; a node error (invalid params); a method the gateway denies; a batch of three with one unknown method.
    await rpc({ jsonrpc: '2.0', id: 2, method: 'eth_chainId' });
    await rpc({ jsonrpc: '2.0', id: 3, method: 'eth_blockNumber' });
    const nodeError = (await rpc({ jsonrpc: '2.0', id: 4, method: 'eth_getBalance', params: ['not-an-address', 'latest'] })).json();
    expect(nodeError.error).toBeDefined();
    expect((await rpc({ jsonrpc: '2.0', id: 5, method: 'debug_traceTransaction', params: ['0x00'] })).json().error.code).toBe(-32601);
    const batch = (
      await rpc([
        { jsonrpc: '2.0', id: 6, method: 'eth_blockNumber' },
        { jsonrpc: '2.0', id: 7, method: 'net_version' },
        { jsonrpc: '2.0', id: 8, method: 'eth_noSuchMethod' },
      ])
    ).json();
    expect(batch).toHaveLength(3);

    const expected = { requests: 8, errors: 3, success: 5 };
    let m = (await metrics(o.auth)).json();
    const deadline = Date.now() + 5000;
    while (m.totals.requests < expected.requests && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      m = (await metrics(o.auth)).json();
    }
    expect(m.totals).toMatchObject({ ...expected, successRate: 62.5, errorRate: 37.5 });
    expect(m.byChain).toEqual([expect.objectContaining({ chain: 'local', requests: 8 })]);
    const methods = Object.fromEntries(m.byMethod.map((x: { method: string; requests: number; errors: number }) => [x.method, [x.requests, x.errors]]));
    expect(methods).toEqual({
      eth_blockNumber: [3, 0],
      eth_chainId: [1, 0],
      net_version: [1, 0],
      eth_getBalance: [1, 1],
      debug_traceTransaction: [1, 1],
      eth_noSuchMethod: [1, 1],
    });
    expect(m.errors.map((e: { method: string; code: number }) => `${e.method}:${e.code}`).sort()).toEqual(
      [
        `debug_traceTransaction:-32601`,
        `eth_getBalance:${nodeError.error.code}`,
        `eth_noSuchMethod:${batch.find((r: { id: number }) => r.id === 8).error.code}`,
      ].sort(),
    );
    expect(m.totals.avgResponseMs).toBeGreaterThan(0);
    expect(m.totals.avgNodeLatencyMs).toBeGreaterThan(0);
    // The account's usage counts quota used: every call but the denied debug_traceTransaction, which reached no node.
    expect((await inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().usage.requests).toBe(7);
    const ips = (
      await inject({
        method: 'GET',
        url: `/api/v1/metrics/tokens/${(await inject({ method: 'GET', url: '/api/v1/tokens', headers: o.auth })).json().tokens[0].id}`,
        headers: o.auth,
      })
    ).json().clientIps;
    expect(ips).toEqual([expect.objectContaining({ ip: '127.0.0.1', count: 8 })]);
  });
});

describe('metrics requests that are refused', () => {
  let o: Awaited<ReturnType<typeof owner>>;
  beforeAll(async () => {
    o = await owner(t.app);
  });

  it.each([
    ['a malformed timestamp', '?start=last-tuesday'],
    ['a timestamp without a zone', '?start=2024-05-01T00:00:00'],
    ['end before start', '?start=2024-05-02T00:00:00Z&end=2024-05-01T00:00:00Z'],
    ['an unknown chain', '?chain=doge'],
    ['an end far in the future', '?end=2999-01-01T00:00:00Z'],
    ['a repeated parameter', '?chain=eth&chain=sol'],
    ['an unknown parameter', '?from=2024-05-01'],
  ])('400 problem+json for %s, in the shape of every validation error', async (_label, query) => {
    const res = await metrics(o.auth, query);
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ status: 400, code: 'validation_failed', detail: expect.stringMatching(/^query[.:]/) });
    // Each problem in `errors`, with the part it was in, whether the schema or the handler found it.
    expect(res.json().errors).toEqual([expect.objectContaining({ in: 'query', path: expect.any(String), message: expect.any(String) })]);
  });

  it('an unknown chain names the parameter and the chains there are', async () => {
    const res = (await metrics(o.auth, '?chain=doge')).json();
    expect(res.detail).toMatch(/^query\.chain: unknown chain "doge"; known chains: .*\beth\b/);
    expect(res.errors).toEqual([{ in: 'query', path: 'chain', message: expect.stringMatching(/^unknown chain "doge"/) }]);
  });

  it('401 without credentials, with an unknown or revoked API token', async () => {
    expect((await metrics({})).statusCode).toBe(401);
    const { id, token } = await createToken(o.auth, 'soon revoked');
    expect((await metrics({ authorization: `Bearer ${token}` })).statusCode).toBe(200);
    await inject({ method: 'DELETE', url: `/api/v1/tokens/${id}`, headers: o.auth });
    const revoked = await metrics({ authorization: `Bearer ${token}` });
    expect(revoked.statusCode).toBe(401);
    expect(revoked.json().code).toBe('unauthorized');
  });

  it("401 says to pass an API token, the call's credential in the spec, not only an access token", async () => {
    const { token } = await createToken(o.auth, 'for the message');
    for (const [headers, detail] of [
      [{}, 'Pass an API token as "Authorization: Bearer gk_…" (or an access token gka_…, or log in).'],
      [{ authorization: `Basic ${token}` }, 'Use "Authorization: Bearer <API token or access token>".'],
      [{ authorization: 'Bearer gk_mistyped' }, 'The API token is not valid.'],
    ] as const) {
      const res = await metrics(headers);
      expect(res.statusCode).toBe(401);
      expect(res.json()).toMatchObject({ code: 'unauthorized', detail });
    }
    // The owner calls keep asking for what they take.
    const tokens = await inject({ method: 'GET', url: '/api/v1/tokens', headers: { authorization: `Basic ${token}` } });
    expect(tokens.json()).toMatchObject({ code: 'unauthorized', detail: 'Use "Authorization: Bearer <access token>".' });
  });
});
