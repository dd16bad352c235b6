import type { UsageRecord } from '../../src/domain/usage.js';

/** The fields of a plain successful call on eth, before a test's own. */
const plainCall = {
  chain: 'eth',
  method: 'eth_blockNumber',
  status: 200,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 3,
  upstreamMs: 2,
  clientIp: '192.0.2.1',
  upstream: 'x',
} satisfies Partial<UsageRecord>;

/** A successful `eth_call` as the gateway meters it, with the given account, token and time; `overrides` change the rest. */
export const usageCall = (accountId: string, tokenId: string, at: string, overrides: Partial<UsageRecord> = {}): UsageRecord => ({
  requestId: `r-${at}-${tokenId}`,
  at,
  accountId,
  tokenId,
  ...plainCall,
  method: 'eth_call',
  upstream: 'node-1',
  charged: true,
  ...overrides,
});

/** The calls a test seeds for one account: `records` in the order added, for `recordUsage` (usageLog.ts). */
export interface UsageCalls {
  readonly records: UsageRecord[];
  /** Adds a call at `at` (ms since the epoch): a plain `eth_blockNumber` on eth, then `defaults`, then `fields`. */
  add(at: number, fields?: Partial<UsageRecord>): UsageRecord;
}

/**
 * Calls for one account and token, numbered as they are added: the n-th has the request id
 * `<prefix>-<account>-<n>`. `defaults` are the test's own figures for every call (latencies,
 * client address, node); each call's `fields` change the rest (method, chain, error, token).
 */
export function usageCalls(prefix: string, o: { accountId: string }, tokenId: string, defaults: Partial<UsageRecord> = {}): UsageCalls {
  const records: UsageRecord[] = [];
  return {
    records,
    add(at, fields = {}) {
      const record: UsageRecord = {
        requestId: `${prefix}-${o.accountId}-${records.length}`,
        at: new Date(at).toISOString(),
        accountId: o.accountId,
        tokenId,
        ...plainCall,
        ...defaults,
        ...fields,
      };
      records.push(record);
      return record;
    },
  };
}
