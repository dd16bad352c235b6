import { eventually } from './eventually.js';
import type { TestApp } from './testApp.js';

/** A call's status and its `X-MonthlyLimit-Remaining`. */
export type QuotaAnswer = [status: number, monthlyRemaining: string | undefined];

/** `n` eth_blockNumber calls on `local` through the service, one after another: each one's status and monthly remaining. */
export async function quotaCalls(t: Pick<TestApp, 'app'>, token: string, n: number): Promise<QuotaAnswer[]> {
  const out: QuotaAnswer[] = [];
  for (let i = 0; i < n; i++) {
    const res = await t.app.inject({
      method: 'POST',
      url: `/local/${token}`,
      headers: { 'content-type': 'application/json' },
      payload: { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] },
    });
    out.push([res.statusCode, res.headers['x-monthlylimit-remaining'] as string | undefined]);
  }
  return out;
}

/** Runs `body` with the ingester stopped: calls made meanwhile are handed over but not in the totals. */
export async function unprojected(t: Pick<TestApp, 'runtime'>, body: () => Promise<void>): Promise<void> {
  const ingester = t.runtime.ingester;
  if (!ingester) throw new Error('no ingester');
  await ingester.stop();
  try {
    await body();
  } finally {
    ingester.start();
  }
}

/** The account view's charged requests and remaining quota, once projected as `expected`. */
export const accountUsage = (t: Pick<TestApp, 'app'>, auth: Record<string, string>, expected: { requests: number; remaining: number }) =>
  eventually(
    async () => {
      const usage = (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: auth })).json().usage as { requests: number; remaining: number };
      return { requests: usage.requests, remaining: usage.remaining };
    },
    (u) => u.requests === expected.requests && u.remaining === expected.remaining,
    10_000,
  );
