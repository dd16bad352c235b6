import { describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { Telemetry } from '../../src/infra/telemetry.js';

const record = (chain: string, method: string, status: number): UsageRecord => ({
  requestId: `r-${Math.random()}`,
  at: '2026-11-24T05:00:00.000Z',
  accountId: 'acc-1',
  tokenId: 'tok-1',
  chain,
  method,
  status,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 1.5,
  upstreamMs: 1,
  clientIp: '127.0.0.1',
  upstream: 'u1',
});

const callsOf = (text: string, chain: string, cls: string, status: number): number | null => {
  const m = new RegExp(`^gateway_chain_calls_total\\{chain="${chain}",method_class="${cls}",status="${status}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
};

describe('telemetry: chain calls by chain, method class and status', () => {
  it('counts each label set on its own, and keeps counting across scrapes', async () => {
    const t = new Telemetry();
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    t.observeCall(record('eth', 'eth_sendRawTransaction', 200));
    t.observeCall(record('eth', 'eth_call', 429));
    t.observeCall(record('trx', 'wallet/getnowblock', 200));
    t.observeCall(record('bsc', 'eth_blockNumber', 200));
    let text = await t.metrics();
    expect(callsOf(text, 'eth', 'read', 200)).toBe(2);
    expect(callsOf(text, 'eth', 'write', 200)).toBe(1);
    expect(callsOf(text, 'eth', 'read', 429)).toBe(1);
    expect(callsOf(text, 'trx', 'rest', 200)).toBe(1);
    expect(callsOf(text, 'bsc', 'read', 200)).toBe(1);
    expect(callsOf(text, 'bsc', 'write', 200)).toBeNull();

    // A method seen before keeps its class; the counter is cumulative, as Prometheus expects.
    t.observeCall(record('eth', 'eth_sendRawTransaction', 200));
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    text = await t.metrics();
    expect(callsOf(text, 'eth', 'write', 200)).toBe(2);
    expect(callsOf(text, 'eth', 'read', 200)).toBe(3);
    expect(callsOf(text, 'trx', 'rest', 200)).toBe(1);
  });
});
