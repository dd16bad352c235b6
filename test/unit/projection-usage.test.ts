import { describe, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { usageTotalsProjection } from '../../src/projections/usageTotals.js';
import { projectionSpec, type SpecEvent } from '../support/projectionSpec.js';

/** The usage projections: month totals per token and account, and the metrics roll-ups, live and folded in batches alike. */

let n = 0;
const call = (overrides: Partial<UsageRecord>): SpecEvent => {
  const record: UsageRecord = {
    requestId: `req-${n++}`,
    at: '2026-11-03T10:00:00.000Z',
    accountId: 'acc_A',
    tokenId: 'tok_1',
    chain: 'eth',
    method: 'eth_call',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 12,
    upstreamMs: 10,
    clientIp: '192.0.2.1',
    upstream: 'eth-1',
    retentionDays: 30,
    charged: true,
    ...overrides,
  };
  return { streamId: usageStream(record.accountId), type: USAGE_EVENT_TYPE, version: 1, data: { ...record } };
};

describe('usage totals projection', () => {
  it("counts requests, errors and uncharged calls per token and account per month, and each token's last use", () => {
    projectionSpec(usageTotalsProjection)
      .given([
        call({}),
        call({ at: '2026-11-03T10:00:01.000Z', tokenId: 'tok_2', rpcErrorCode: 3, errorMessage: 'execution reverted' }),
        call({ at: '2026-11-03T10:00:02.000Z', status: 429, rpcErrorCode: -32005, charged: false }),
        call({ at: '2026-12-01T00:00:00.000Z' }),
      ])
      .thenDocuments({
        token_month_usage: {
          'tok_1/2026-11': { requests: 2, errors: 1, uncharged: 1, lastUsedAt: '2026-11-03T10:00:02.000Z' },
          'tok_2/2026-11': { requests: 1, errors: 1, uncharged: 0, lastUsedAt: '2026-11-03T10:00:01.000Z' },
          'tok_1/2026-12': { requests: 1, errors: 0, uncharged: 0, lastUsedAt: '2026-12-01T00:00:00.000Z' },
        },
        account_month_usage: {
          'acc_A/2026-11': { requests: 3, errors: 2, uncharged: 1 },
          'acc_A/2026-12': { requests: 1, errors: 0, uncharged: 0 },
        },
      });
  });
});

describe('usage metrics projection', () => {
  it('folds a batch of calls over accounts, tokens, chains, minutes and errors to what it writes call by call', () => {
    const events: SpecEvent[] = [];
    for (let i = 0; i < 60; i++) {
      events.push(
        call({
          at: new Date(Date.UTC(2026, 10, 3, 10, i % 7, i % 60)).toISOString(),
          accountId: i % 3 === 0 ? 'acc_B' : 'acc_A',
          tokenId: `tok_${i % 4}`,
          chain: i % 2 === 0 ? 'eth' : 'sol',
          method: ['eth_call', 'eth_blockNumber', 'getSlot'][i % 3] as string,
          status: i % 10 === 0 ? 429 : 200,
          rpcErrorCode: i % 5 === 0 ? 3 : null,
          errorMessage: i % 5 === 0 ? 'execution reverted' : null,
          totalMs: 5 + i,
          clientIp: `192.0.2.${i % 5}`,
        }),
      );
    }
    projectionSpec(usageMetricsProjection).given(events).thenFoldsAlike();
  });
});
