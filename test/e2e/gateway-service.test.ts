import { FetchRequest, JsonRpcProvider } from 'ethers';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { eventually } from '../support/eventually.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

/** The whole service: real tokens from the management API, the real gatekeeper, limiter and metering, ganache behind. */
let node: GanacheNode;
let t: TestApp;
let base: string;

beforeAll(async () => {
  node = await startGanache();
});
afterAll(async () => {
  await node?.close();
});

const rpc = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
const blockNumber = { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] };

/** A new owner's token, on `plan` if given, with the token's other fields (`expires_in_days`...) if given. */
async function newToken(plan?: string, fields: Record<string, unknown> = {}) {
  const o = await owner(t.app);
  if (plan) {
    await t.app.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan },
    });
  }
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'svc', ...fields } });
  if (res.statusCode !== 201) throw new Error(`token not created: ${res.body}`);
  return { ...o, token: res.json().token as string, tokenId: res.json().id as string, expiresAt: res.json().expires_at as string | null };
}

const usageOf = async (accountId: string): Promise<UsageRecord[]> => recordedCalls(t.runtime.store, accountId);

// Both ways the embedded default can run: its stores on a thread of their own (the default), or on the main thread.
describe.each(['on', 'off'])('STORAGE_THREAD=%s', (storageThread) => {
  beforeAll(async () => {
    t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_ETH: node.url, STORAGE_THREAD: storageThread } });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const address = t.app.server.address();
    base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });
  afterAll(async () => {
    await t?.close();
  });

  describe('the gatekeeper', () => {
    it('admits a cached token at once, with no promise, and reads the read model only for the first call', async () => {
      // The token's creation reaches the cache as an invalidation, maybe after the API answered;
      // one arriving during the first read rightly caches nothing, so wait until it was heard.
      const heard: string[] = [];
      const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (message) => heard.push(message));
      const o = await newToken('unlimited');
      await eventually(async () => heard.includes(`token:${o.tokenId}`), Boolean);
      await unsubscribe();
      expect(heard).toContain(`token:${o.tokenId}`);
      const gatekeeper = t.runtime.gateway?.gatekeeper;
      if (!gatekeeper) throw new Error('no gateway in this runtime');
      const request = () => ({ chain: 'eth', token: o.token, via: 'path' as const, cost: 1, nowMs: Date.now() });
      const first = gatekeeper.admit(request());
      expect(first).toBeInstanceOf(Promise);
      expect((await first).ok).toBe(true);
      const next = gatekeeper.admit(request());
      expect(next).not.toBeInstanceOf(Promise);
      expect(next).toMatchObject({ ok: true, granted: 1, caller: { tokenId: o.tokenId } });
    });

    it('admits a token with an expiry until its date and refuses it with 401 from then on', async () => {
      const { token, expiresAt } = await newToken('developer', { expires_in_days: 1 });
      if (expiresAt === null) throw new Error('the token has no expiry');
      const gatekeeper = t.runtime.gateway?.gatekeeper;
      if (!gatekeeper) throw new Error('no gateway in this runtime');
      const at = async (nowMs: number) => gatekeeper.admit({ chain: 'eth', token, via: 'path', cost: 1, nowMs });
      const expiry = Date.parse(expiresAt);
      expect(await at(expiry - 1)).toMatchObject({ ok: true, granted: 1 });
      expect(await at(expiry)).toMatchObject({ ok: false, status: 401 });
      expect(await at(expiry + 86_400_000)).toMatchObject({ ok: false, status: 401 });
    });

    it('admits each call on a connection as the token it carries, whatever token came before on it', async () => {
      const a = await newToken('unlimited');
      const b = await newToken();
      const gatekeeper = t.runtime.gateway?.gatekeeper;
      if (!gatekeeper) throw new Error('no gateway in this runtime');
      const connection = {};
      const on = async (token: string) => gatekeeper.admit({ chain: 'eth', token, via: 'path', cost: 1, nowMs: Date.now(), connection });
      for (const [token, tokenId] of [
        [a.token, a.tokenId],
        [a.token, a.tokenId],
        [b.token, b.tokenId],
        [a.token, a.tokenId],
      ]) {
        expect(await on(token as string)).toMatchObject({ ok: true, caller: { tokenId } });
      }
      const flipped = a.token.charAt(5) === 'a' ? 'b' : 'a';
      expect(await on(`${a.token.slice(0, 5)}${flipped}${a.token.slice(6)}`)).toMatchObject({ ok: false, status: 401 });
      await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${a.tokenId}`, headers: a.auth });
      expect(
        await eventually(
          () => on(a.token),
          (admission) => !admission.ok,
          1000,
        ),
      ).toMatchObject({ ok: false, status: 401 });
      expect(await on(b.token)).toMatchObject({ ok: true, caller: { tokenId: b.tokenId } });
    });

    it('refuses a mistyped or overlong token with 401 without reading the read model', async () => {
      const o = await newToken();
      const gatekeeper = t.runtime.gateway?.gatekeeper;
      if (!gatekeeper) throw new Error('no gateway in this runtime');
      const lookups = vi.spyOn(t.runtime.queries, 'tokenDocByHash');
      try {
        // One character of the random part changed: the checksum no longer matches.
        const flipped = o.token.charAt(5) === 'a' ? 'b' : 'a';
        const mistyped = `${o.token.slice(0, 5)}${flipped}${o.token.slice(6)}`;
        for (const token of [mistyped, `${o.token}x`, o.token.slice(0, -1)]) {
          const admission = await gatekeeper.admit({ chain: 'eth', token, via: 'path', cost: 1, nowMs: Date.now() });
          expect(admission, token).toMatchObject({ ok: false, status: 401 });
        }
        expect(lookups).not.toHaveBeenCalled();
        expect((await gatekeeper.admit({ chain: 'eth', token: o.token, via: 'path', cost: 1, nowMs: Date.now() })).ok).toBe(true);
        expect(lookups).toHaveBeenCalledTimes(1);
      } finally {
        lookups.mockRestore();
      }
    });
  });

  describe('chain calls with real tokens', () => {
    it('serves ethers through the path token and the Bearer header, with the limit headers', async () => {
      const { token } = await newToken();
      const byPath = new JsonRpcProvider(`${base}/local/${token}`, undefined, { staticNetwork: true });
      const req = new FetchRequest(`${base}/local`);
      req.setHeader('authorization', `Bearer ${token}`);
      const byBearer = new JsonRpcProvider(req, undefined, { staticNetwork: true });
      expect(await byPath.getBlockNumber()).toBeGreaterThanOrEqual(0);
      expect((await byBearer.getNetwork()).chainId).toBe(1337n);
      byPath.destroy();
      byBearer.destroy();
      const res = await rpc(`/local/${token}`, blockNumber);
      for (const h of [
        'x-ratelimit-limit',
        'x-ratelimit-remaining',
        'x-ratelimit-reset',
        'x-monthlylimit-limit',
        'x-monthlylimit-remaining',
        'x-monthlylimit-reset',
      ]) {
        expect(res.headers.get(h), h).toMatch(/^\d+$/);
      }
      expect(res.headers.get('x-ratelimit-limit')).toBe('5');
    });

    it('refuses unknown, malformed, access and query-string tokens with 401, and a chain outside the plan with 403', async () => {
      const o = await newToken();
      expect((await rpc('/local/gk_notatoken', blockNumber)).status).toBe(401);
      expect((await rpc(`/local/${o.accessToken}`, blockNumber)).status).toBe(401);
      expect((await rpc(`/local?api_key=${o.token}`, blockNumber)).status).toBe(401);
      expect((await rpc('/local', blockNumber, { authorization: `Basic ${Buffer.from(`${o.token}:`).toString('base64')}` })).status).toBe(401);
      const avax = await rpc(`/avax/${o.token}`, blockNumber);
      expect(avax.status).toBe(403);
      expect((await avax.json()).error.code).toBe(-32003);
      expect((await rpc(`/nochain/${o.token}`, blockNumber)).status).toBe(404);
    });

    it('enforces disable (403 token_disabled), enable, and revoke (401) within a second', async () => {
      const o = await newToken();
      expect((await rpc(`/local/${o.token}`, blockNumber)).status).toBe(200);
      const patch = (status: string) => t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth, payload: { status } });
      await patch('disabled');
      let started = Date.now();
      const disabled = await eventually(
        () => rpc(`/local/${o.token}`, blockNumber),
        (r) => r.status === 403,
        1000,
      );
      expect(disabled.status).toBe(403);
      expect(Date.now() - started).toBeLessThan(1000);
      await patch('active');
      expect(
        (
          await eventually(
            () => rpc(`/local/${o.token}`, blockNumber),
            (r) => r.status === 200,
            1000,
          )
        ).status,
      ).toBe(200);
      await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth });
      started = Date.now();
      const revoked = await eventually(
        () => rpc(`/local/${o.token}`, blockNumber),
        (r) => r.status === 401,
        1000,
      );
      expect(revoked.status).toBe(401);
      expect(Date.now() - started).toBeLessThan(1000);
    });

    it('answers 429 with Retry-After beyond the plan rate, without using quota for refused calls', async () => {
      const o = await newToken();
      // Bursts of 12 against 5 rps until one call is refused: a stalled machine can spread a burst
      // over several one-second windows, so the bound is checked per window the limiter counted in.
      const results: Response[] = [];
      for (let burst = 0; burst < 5 && !results.some((r) => r.status === 429); burst++) {
        results.push(...(await Promise.all(Array.from({ length: 12 }, () => rpc(`/local/${o.token}`, blockNumber)))));
      }
      const served = results.filter((r) => r.status === 200);
      const refused = results.filter((r) => r.status === 429);
      expect(served.length + refused.length).toBe(results.length);
      const servedByWindow = new Map<string | null, number>();
      for (const r of served) {
        const window = r.headers.get('x-ratelimit-reset');
        servedByWindow.set(window, (servedByWindow.get(window) ?? 0) + 1);
      }
      expect(servedByWindow.has(null)).toBe(false);
      expect(Math.max(...servedByWindow.values())).toBeLessThanOrEqual(5);
      expect(refused.length).toBeGreaterThan(0);
      expect(refused[0]?.headers.get('retry-after')).toMatch(/^\d+$/);
      const body = await refused[0]?.json();
      expect(body.error).toMatchObject({ code: -32005, data: { retryAfter: expect.any(Number) } });
      const remaining = Math.min(...results.map((r) => Number(r.headers.get('x-monthlylimit-remaining'))));
      expect(remaining).toBe(100_000 - served.length);
      expect(results[results.length - 1]?.headers.get('x-monthlylimit-limit')).toBe('100000');
    });

    it('surfaces a limit breach as an error in ethers', async () => {
      const o = await newToken();
      const provider = new JsonRpcProvider(`${base}/local/${o.token}`, undefined, { staticNetwork: true, batchMaxCount: 1 });
      // ethers retries a 429 up to 12 times, waiting Retry-After read as milliseconds: on a busy
      // machine those retries can span a few seconds' windows (5 rps each), so send far more.
      const outcomes = await Promise.allSettled(Array.from({ length: 40 }, () => provider.send('eth_blockNumber', [])));
      provider.destroy();
      const failures = outcomes.filter((x) => x.status === 'rejected') as PromiseRejectedResult[];
      expect(failures.length).toBeGreaterThan(0);
      expect(String(failures[0]?.reason)).toMatch(/429|Too Many|limit/i);
    });
  });

  describe('metering', () => {
    it('records exactly one usage event per call and batch member, refused ones included', async () => {
      const o = await newToken('developer');
      const calls = [
        rpc(`/local/${o.token}`, blockNumber),
        rpc(`/local/${o.token}`, [blockNumber, { ...blockNumber, id: 2 }, { jsonrpc: '2.0', id: 3, method: 'admin_peers', params: [] }]),
        rpc('/local', { ...blockNumber, id: 'x' }, { authorization: `Bearer ${o.token}` }),
        rpc(`/local/${o.token}`, { jsonrpc: '2.0', id: 4, method: 'eth_getBalance', params: ['0xnot-an-address', 'latest'] }),
      ];
      await Promise.all(calls);
      await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth, payload: { status: 'disabled' } });
      // The API answers once the change is projected; the gateway hears of it just after (the
      // invalidation follows the commit), so a call or two may still be served: each is metered too.
      let servedMeanwhile = 0;
      const deadline = Date.now() + 5000;
      while ((await rpc(`/local/${o.token}`, blockNumber)).status === 200 && Date.now() < deadline) servedMeanwhile++;
      const expected = 1 + 3 + 1 + 1 + servedMeanwhile + 1;
      const usage = await eventually(
        () => usageOf(o.accountId),
        (u) => u.length >= expected,
      );
      expect(usage).toHaveLength(expected);
      expect(new Set(usage.map((u) => u.requestId)).size).toBe(expected);
      expect(usage.every((u) => u.tokenId === o.tokenId && u.chain === 'local' && u.clientIp === '127.0.0.1')).toBe(true);
      expect(usage.filter((u) => u.method === 'admin_peers')[0]).toMatchObject({ rpcErrorCode: -32601 });
      expect(usage.filter((u) => u.status === 403 && u.method === 'eth_blockNumber')).toHaveLength(1);
      expect(usage.filter((u) => u.method === 'eth_getBalance')[0]?.rpcErrorCode).not.toBeNull();
      // Nothing more arrives later (no duplicates from retries).
      await new Promise((r) => setTimeout(r, 300));
      expect(await usageOf(o.accountId)).toHaveLength(expected);
    });

    it('shows one figure of quota used everywhere: the calls the limiter charged, never the refused ones', async () => {
      const o = await newToken('developer', { monthly_limit: 6, rate_limit: 25 });
      const answers: Response[] = [];
      for (let i = 0; i < 12; i++) answers.push(await rpc(`/local/${o.token}`, blockNumber));
      await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth, payload: { status: 'disabled' } });
      // Each call of the wait is refused too: a 429 until the disable reaches the gateway, then the 403.
      let waited = 0;
      await eventually(
        async () => {
          waited += 1;
          return (await rpc(`/local/${o.token}`, blockNumber)).status;
        },
        (s) => s === 403,
      );
      answers.push(await rpc(`/local/${o.token}`, blockNumber));
      expect(answers.map((a) => a.status)).toEqual([...Array(6).fill(200), ...Array(6).fill(429), 403]);
      expect(answers[11]?.headers.get('x-monthlylimit-remaining')).toBe('0');
      const refusedCount = answers.filter((a) => a.status !== 200).length + waited;
      // Generous waits: a loaded machine ingests and projects late, and nothing here is timed.
      const usage = await eventually(
        () => usageOf(o.accountId),
        (u) => u.length >= 6 + refusedCount,
        15_000,
      );
      expect(usage.filter((u) => u.charged === true)).toHaveLength(6);
      expect(usage.filter((u) => u.charged === false)).toHaveLength(refusedCount);
      // Every projection (totals and metrics alike) has applied them before the figures are read.
      const head = await t.runtime.store.headPosition();
      if (head !== null) await t.runtime.projector?.waitFor(head, 15_000);

      const figures = async () => {
        const token = (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth })).json();
        const account = (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json();
        const metrics = (await t.app.inject({ method: 'GET', url: `/api/v1/metrics/tokens/${o.tokenId}`, headers: o.auth })).json();
        const user = (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: o.auth })).json();
        return { token, account, metrics, user };
      };
      const seen = await eventually(figures, (f) => f.metrics.totals?.requests === 6 + refusedCount, 15_000);
      expect(seen.token.current_month_usage).toBe(6);
      expect(seen.metrics.limits).toMatchObject({ appliesTo: 'token', monthlyLimit: 6, used: 6, remaining: 0 });
      expect(seen.account.usage.requests).toBe(6);
      // The token has its own limit: its calls count apart, none against the account's (spec: Authentication 6).
      expect(seen.user.limits.used).toBe(0);
      // Refused calls stay visible as requests and errors.
      expect(seen.metrics.totals).toMatchObject({ requests: 6 + refusedCount, errors: refusedCount });
    });

    it("counts a token with its own monthly limit apart from the account's remaining, as the limiter does", async () => {
      const o = await newToken('developer');
      const own = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'own', monthly_limit: 1000 } });
      const ownToken = own.json().token as string;
      for (let i = 0; i < 3; i++) expect((await rpc(`/local/${ownToken}`, blockNumber)).status).toBe(200);
      let last: Response | undefined;
      for (let i = 0; i < 2; i++) last = await rpc(`/local/${o.token}`, blockNumber);
      // The limiter: the account's quota has the shared token's 2 calls, not the other's 3.
      expect(last?.headers.get('x-monthlylimit-remaining')).toBe(String(5_000_000 - 2));
      const head = await t.runtime.store.headPosition();
      if (head !== null) await t.runtime.projector?.waitFor(head, 15_000);
      const figures = async () => {
        const account = (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json();
        const user = (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: o.auth })).json();
        const shared = (await t.app.inject({ method: 'GET', url: `/api/v1/metrics/tokens/${o.tokenId}`, headers: o.auth })).json();
        return { account, user, shared };
      };
      const seen = await eventually(figures, (f) => f.account.usage.requests === 5, 15_000);
      // Every call of the month is a request of the account; only the shared token's count against its limit.
      expect(seen.account.usage).toMatchObject({ requests: 5, monthly_limit: 5_000_000, remaining: 5_000_000 - 2 });
      expect(seen.user.limits).toMatchObject({ monthlyLimit: 5_000_000, used: 2, remaining: 5_000_000 - 2 });
      expect(seen.shared.limits).toMatchObject({ appliesTo: 'account', monthlyLimit: 5_000_000, used: 2, remaining: 5_000_000 - 2, tokenUsed: 2 });
    });
  });

  describe('operations endpoints', () => {
    it('exposes Prometheus metrics that follow the calls, the limiter, the queue and the projector', async () => {
      const scrape = async () => (await fetch(`${base}/metrics`)).text();
      const count = (text: string, line: RegExp) => Number(line.exec(text)?.[1] ?? 0);
      const calls = /gateway_chain_calls_total\{chain="local",method_class="read",status="200"\} (\d+)/;
      const admitted = /gateway_limiter_decisions_total\{outcome="admitted"\} (\d+)/;
      const before = await scrape();
      const o = await newToken('developer');
      for (let i = 0; i < 3; i++) expect((await rpc(`/local/${o.token}`, blockNumber)).status).toBe(200);
      const after = await scrape();
      expect(count(after, calls) - count(before, calls)).toBe(3);
      expect(count(after, admitted) - count(before, admitted)).toBe(3);
      expect(after).toMatch(/gateway_call_duration_seconds_bucket\{le="0.1",chain="local"\} \d+/);
      expect(after).toMatch(/gateway_upstream_healthy\{chain="local",upstream="[^"]+"\} 1/);
      expect(after).toMatch(/gateway_usage_queue_depth \d+/);
      expect(after).toMatch(/gateway_projection_lag_seconds [\d.e-]+/);
      expect(after).toMatch(/gateway_cached_tokens [1-9]\d*/);
      // A static answer is kept: the response cache's gauges show it, against the default 64 MiB bound.
      const chainId = { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] };
      expect((await rpc(`/local/${o.token}`, chainId)).status).toBe(200);
      const cached = await scrape();
      expect(count(cached, /gateway_response_cache_entries (\d+)/)).toBeGreaterThan(0);
      expect(count(cached, /gateway_response_cache_bytes (\d+)/)).toBeGreaterThan(0);
      expect(cached).toMatch(/gateway_response_cache_max_bytes 67108864\n/);
    });

    it('is healthy and ready once the projections have caught up', async () => {
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready' });
    });
  });
});
