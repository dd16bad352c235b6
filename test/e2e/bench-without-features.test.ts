import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseFeatures, withoutFeatures } from '../../bench/servers/withoutFeatures.js';
import type { Admission, AdmissionRequest } from '../../src/gateway/admission.js';
import { owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The benchmark's feature switches (bench/compare-gateway.ts WITHOUT=) take out what they say
 * and nothing else: a switch that silently did nothing would report a feature as free.
 */
let t: TestApp;
let token: string;

beforeAll(async () => {
  // eth's upstream is a closed local port: its calls fail (502) without leaving the machine.
  t = await startTestApp({ env: { STORAGE_THREAD: 'off', UPSTREAM_ETH: 'http://127.0.0.1:1' } });
  const o = await owner(t.app);
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'bench' } });
  token = res.json().token as string;
});
afterAll(async () => {
  await t?.close();
});

const call = (overrides: Partial<AdmissionRequest> = {}): AdmissionRequest => ({ chain: 'eth', token, via: 'path', cost: 1, nowMs: Date.now(), ...overrides });
const admitted = async (request: AdmissionRequest): Promise<Admission> => {
  const gatekeeper = t.runtime.gateway?.gatekeeper;
  if (!gatekeeper) throw new Error('no gateway in this runtime');
  return gatekeeper.admit(request);
};

describe('bench feature switches', () => {
  it('refuses an unknown feature, naming the known ones', () => {
    expect(parseFeatures(' usage, headers ')).toEqual(['usage', 'headers']);
    expect(() => parseFeatures('usage,caching')).toThrow(/unknown feature "caching".*usage, metrics, limits, headers, auth, coalescing, cache/);
  });

  it('takes out the limiter, the headers, admission and usage records, and only those', async () => {
    // As the service runs: a Free token (5 calls a second) is refused after its fifth call in a second.
    const nowMs = Date.now();
    const before = await Promise.all(Array.from({ length: 6 }, () => admitted(call({ nowMs }))));
    expect(before.filter((a) => a.ok)).toHaveLength(5);
    expect(before[0]?.headers['x-ratelimit-limit']).toBe('5');

    withoutFeatures(t.runtime, parseFeatures('limits'));
    const unlimited = await Promise.all(Array.from({ length: 20 }, () => admitted(call({ nowMs: nowMs + 1000 }))));
    expect(unlimited.every((a) => a.ok)).toBe(true);
    expect(unlimited[0]?.headers['x-ratelimit-limit']).toBe('1000000');
    // Auth still runs (the last character changed: to another one, whatever the token ends with).
    const mistyped = `${token.slice(0, -1)}${token.endsWith('x') ? 'y' : 'x'}`;
    expect(await admitted(call({ token: mistyped }))).toMatchObject({ ok: false, status: 401 });

    withoutFeatures(t.runtime, parseFeatures('auth,headers'));
    expect(await admitted(call())).toMatchObject({ ok: true, headers: {} });
    // Once a call was admitted, every single call gets its admission: no token lookup any more.
    expect(await admitted(call({ token: 'not-a-token' }))).toMatchObject({ ok: true, headers: {} });

    // A chain call queues its usage record (a 502 here: metered too)...
    const queued = vi.spyOn(t.runtime.usageQueue, 'enqueue');
    const chainCall = () => t.app.inject({ method: 'POST', url: `/eth/${token}`, payload: { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] } });
    await chainCall();
    expect(queued).toHaveBeenCalledTimes(1);
    // ...and none without usage.
    withoutFeatures(t.runtime, parseFeatures('usage'));
    await chainCall();
    expect(queued).toHaveBeenCalledTimes(1);
  });
});
