import type { UsageRecord } from '../../src/domain/usage.js';

/** A successful `eth_call` as the gateway meters it, with the given account, token and time; `overrides` change the rest. */
export const usageCall = (accountId: string, tokenId: string, at: string, overrides: Partial<UsageRecord> = {}): UsageRecord => ({
  requestId: `r-${at}-${tokenId}`,
  at,
  accountId,
  tokenId,
  chain: 'eth',
  method: 'eth_call',
  status: 200,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 3,
  upstreamMs: 2,
  clientIp: '192.0.2.1',
  upstream: 'node-1',
  charged: true,
  ...overrides,
});
