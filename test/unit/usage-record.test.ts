import { describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, UsageRecord } from '../../src/domain/usage.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { asUsageRecord, usageRecordOf } from '../../src/projections/usageRecord.js';

const valid: Record<string, unknown> = {
  requestId: 'req-1',
  at: '2024-05-07T13:45:12.345Z',
  accountId: 'acc_A',
  tokenId: 'tok_T',
  chain: 'eth',
  method: 'eth_call',
  status: 200,
  rpcErrorCode: 3,
  errorMessage: 'execution reverted',
  totalMs: 12.5,
  upstreamMs: 10,
  clientIp: '203.0.113.9',
  upstream: 'eth-1',
  retentionDays: 30,
  charged: true,
  cache: 'hit',
};

/** Values of every JSON type and the edges of the numeric checks. */
const VALUES: unknown[] = ['', 'text', 0, -1, 1, 1.5, 2 ** 53, -0.001, 1e308, null, true, false, [], {}, undefined];

describe('the usage record guard', () => {
  it('gives the schema’s verdict for every field missing, or set to a value of every kind', () => {
    // Derived from the schema, so a field added to UsageRecord and not to the guard fails here.
    const fields = Object.keys(UsageRecord.shape);
    expect(fields.sort()).toEqual(Object.keys(valid).sort());
    const cases: Array<Record<string, unknown>> = [valid];
    for (const field of fields) {
      const { [field]: _, ...without } = valid;
      cases.push(without);
      for (const value of VALUES) cases.push({ ...valid, [field]: value });
    }
    for (const data of cases) {
      const schema = UsageRecord.safeParse(data).success;
      expect([data, asUsageRecord(data) !== null]).toEqual([data, schema]);
    }
  });

  it('reads only usage events', () => {
    const stored: StoredEvent = {
      streamId: 'usage-acc_A',
      revision: 0,
      position: '1',
      id: 'e',
      type: USAGE_EVENT_TYPE,
      data: valid,
      metadata: {},
      created: '',
    };
    expect(usageRecordOf(stored)).toBe(valid);
    expect(usageRecordOf({ ...stored, type: 'AccountSignedUp' })).toBeNull();
  });
});
