import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * A gateway that is closing (SIGTERM, a rolling deploy) still answers calls arriving on its open
 * connections, and meters each one: an answer for a known token never leaves without its usage
 * record. Each such answer closes its connection, so the drain ends.
 */

let evm: FakeUpstream;
let t: TestApp;

beforeAll(async () => {
  evm = await startEvmFake();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url } });
});
afterAll(async () => {
  await t?.runtime.close().catch(() => undefined);
  await evm?.close();
});

describe('closing under calls', () => {
  it('serves and meters a call that arrives on an open connection while the server closes', async () => {
    const o = await owner(t.app);
    await t.app.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'unlimited' },
    });
    const created = (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'drain' } })).json();
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const address = t.app.server.address();
    const port = typeof address === 'object' && address ? address.port : 0;

    // A call is at the node (held there) when the close begins; the next comes on the same connection after that.
    evm.mode = 'slow';
    evm.delayMs = 400;
    const body = (id: number) => JSON.stringify({ jsonrpc: '2.0', id, method: 'eth_blockNumber', params: [] });
    const request = (id: number) =>
      `POST /local/${created.token} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body(id).length}\r\n\r\n${body(id)}`;
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString();
    });
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(request(1));
    await eventually(
      async () => evm.calls.length,
      (n) => n >= 1,
      10_000,
    );
    const closing = t.app.close();
    socket.write(request(2));
    await ended;
    await closing;

    const statuses = [...received.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([200, 200]);
    // The first answer keeps the connection for the call behind it; the last one closes it.
    const [first, second] = received.split(/(?=HTTP\/1\.1 )/);
    expect(first).not.toMatch(/connection: close/i);
    expect(second).toMatch(/connection: close/i);
    expect(second).toContain('"id":2');

    // Every answer that left is metered: both calls are in the log once the queue drains.
    const usage = await eventually(
      async () => recordedCalls(t.runtime.store, o.accountId),
      (calls) => calls.length >= 2,
      10_000,
    );
    expect(usage).toHaveLength(2);
  });
});
