import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The batch and body limits of chain calls are the operator's (MAX_BATCH_CALLS, MAX_BODY_BYTES):
 * the service as it runs, over HTTP, with a real node behind.
 */
let node: GanacheNode;
let t: TestApp;
let base: string;

beforeAll(async () => {
  node = await startGanache();
  t = await startTestApp({ env: { UPSTREAM_ETH: node.url, MAX_BATCH_CALLS: '3', MAX_BODY_BYTES: '2048' } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const batchOf = (n: number) => Array.from({ length: n }, (_, id) => ({ jsonrpc: '2.0', id, method: 'eth_chainId', params: [] }));
const post = (token: string, body: string) => fetch(`${base}/eth/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

describe('MAX_BATCH_CALLS and MAX_BODY_BYTES', () => {
  it('answer a batch up to the configured size, and 413 with -32600 beyond it', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const within = await post(token, JSON.stringify(batchOf(3)));
    expect(within.status).toBe(200);
    expect(await within.json()).toHaveLength(3);
    const beyond = await post(token, JSON.stringify(batchOf(4)));
    expect(beyond.status).toBe(413);
    expect(await beyond.json()).toMatchObject({ id: null, error: { code: -32600, message: expect.stringContaining('limit of 3') } });
  });

  it('refuse a body over the configured size with 413', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const call = (padding: number) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [], pad: 'x'.repeat(padding) });
    expect((await post(token, call(1500))).status).toBe(200);
    const over = await post(token, call(2100));
    expect(over.status).toBe(413);
    expect(await over.json()).toMatchObject({ error: { code: -32600 } });
  });

  it('are checked at start: a value out of range stops the process with its name', () => {
    expect(loadConfig({}).gatewayLimits).toEqual({ maxBatch: 100, maxBodyBytes: 1024 * 1024 });
    expect(() => loadConfig({ MAX_BATCH_CALLS: '0' })).toThrow(ConfigError);
    expect(() => loadConfig({ MAX_BODY_BYTES: '10' })).toThrow(/MAX_BODY_BYTES/);
  });
});
