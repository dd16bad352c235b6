import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { evmServiceConfig } from '../support/serviceOnEvmNodes.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * A node's `maxRps` as an operator sets it, in config/chains.json, through the whole service: the
 * file's option reaches the pool (test/unit/upstream-budget.test.ts covers the pool itself).
 */

let a: FakeUpstream;
let b: FakeUpstream;
let t: TestApp;
let base: string;
const dir = mkdtempSync(join(tmpdir(), 'gw-budget-'));

beforeAll(async () => {
  [a, b] = await Promise.all([startEvmFake(), startEvmFake()]);
  t = await startTestApp({ env: evmServiceConfig(dir, { upstreams: [{ url: a.url, maxRps: 5 }, { url: b.url }] }) });
  base = (await listen(t)).url;
});
afterAll(async () => {
  await t?.close();
  await Promise.all([a?.close(), b?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

describe('maxRps in config/chains.json', () => {
  it('holds the node to its budget: 40 reads at once, the budgeted node gets its 5 a second, the other the rest, every caller 200', async () => {
    const token = await newToken(t, { plan: 'unlimited' });
    const read = async (id: number) => {
      // eth_accounts: no head or cache involved; a param of its own each, so no two share one node call.
      const r = await fetch(`${base}/evm/${token.token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'eth_accounts', params: [id] }),
      });
      return r.status;
    };
    const statuses = await Promise.all(Array.from({ length: 40 }, (_, i) => read(i)));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const sent = (f: FakeUpstream) => f.calls.filter((c) => c.body.includes('eth_accounts')).length;
    expect(sent(a) + sent(b)).toBe(40);
    // Within one second 5; the 40 calls may straddle a second's edge: 10 at most. Without the budget, about half (20).
    expect(sent(a)).toBeLessThanOrEqual(10);
    const pool = t.runtime.gateway!.pools.get('evm')!;
    expect(pool.health().map((h) => h.maxRps)).toEqual([5, null]);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(/gateway_upstream_over_budget_total\{chain="evm",upstream="[^"]+"\} 0/);
  });
});
