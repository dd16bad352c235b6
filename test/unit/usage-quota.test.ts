import { describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usedQuota } from '../../src/domain/usage.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { quotaUsed, usageTotalsProjection } from '../../src/projections/usageTotals.js';

/** Quota used: what the limiter charged, counted by the totals projection and read the same way everywhere. */

const record = (overrides: Partial<UsageRecord>): UsageRecord => ({
  requestId: `r-${Math.random()}`,
  at: '2026-11-03T10:00:00.000Z',
  accountId: 'acc1',
  tokenId: 'tok1',
  chain: 'eth',
  method: 'eth_call',
  status: 200,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 1,
  upstreamMs: 1,
  clientIp: '127.0.0.1',
  upstream: 'a',
  ...overrides,
});
const stored = (r: UsageRecord, revision: number): StoredEvent => ({
  streamId: 'usage-acc1',
  revision,
  position: String(revision),
  id: r.requestId,
  type: USAGE_EVENT_TYPE,
  data: { ...r },
  metadata: {},
  created: r.at,
});

describe('quota used', () => {
  it('is what the gateway says it charged; a record from before the flag counts unless refused', () => {
    expect(usedQuota({ status: 200, charged: true })).toBe(true);
    expect(usedQuota({ status: 502, charged: true })).toBe(true);
    expect(usedQuota({ status: 400, charged: false })).toBe(false);
    expect(usedQuota({ status: 200 })).toBe(true);
    for (const status of [401, 403, 429]) expect(usedQuota({ status })).toBe(false);
  });

  it('is projected as requests less the uncharged ones, per token and account, in one fold or one event at a time', () => {
    const records = [
      record({ charged: true }),
      record({ charged: true, status: 502 }),
      record({ charged: false, status: 429, rpcErrorCode: -32005 }),
      record({ charged: false, status: 403 }),
      record({ status: 429 }),
      record({}),
    ];
    const events = records.map(stored);
    const folded = usageTotalsProjection.projectBatch?.(events) ?? [];
    const oneByOne = events.flatMap((e) => usageTotalsProjection.project(e));
    for (const writes of [folded, oneByOne]) {
      const sum = (collection: string, field: string) =>
        writes.filter((w) => w.collection === collection && w.op === 'inc').reduce((n, w) => n + ((w as { inc: Record<string, number> }).inc[field] ?? 0), 0);
      for (const collection of usageTotalsProjection.collections) {
        expect(sum(collection, 'requests')).toBe(6);
        expect(sum(collection, 'uncharged')).toBe(3);
        expect(sum(collection, 'errors')).toBe(4);
      }
    }
  });

  it('reads a month document, one from before the split included (no uncharged count: all of it)', () => {
    expect(quotaUsed({ requests: 10, errors: 2, uncharged: 4 })).toBe(6);
    expect(quotaUsed({ requests: 10, errors: 2 })).toBe(10);
    expect(quotaUsed(null)).toBe(0);
  });
});
