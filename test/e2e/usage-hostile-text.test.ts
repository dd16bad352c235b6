import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasUnstorableText } from '../../src/domain/storableText.js';
import { type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { decodeUsageBatch, USAGE_BATCH_EVENT_TYPE } from '../../src/domain/usageBatch.js';
import { type AlertHarness, startAlertHarness } from '../support/alertHarness.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { createTestDatabase, postgresUnavailable } from '../support/postgres.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCall } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * Text no store can hold, written by a caller (a JSON-RPC method over HTTP or WebSocket) or by a
 * node (its JSON-RPC error's message): U+0000 and lone surrogates, sent as the JSON escapes
 * `\u0000` and `\ud800`, and an emoji where a cut to 120 (the roll-ups' method label) or 200
 * (the error groups' message) would split its pair. On PostgreSQL one such
 * record stopped the read models' projector for every account; the calls are still served,
 * metered and charged, with such code units as U+FFFD.
 */

const NUL = '\u0000';
const HIGH = '\uD800';
const LOW = '\uDC00';
const EMOJI = '\u{1F600}';
const FFFD = '\uFFFD';

/** What the node answers `hostile_<key>` with: a JSON-RPC error carrying this message. */
const NODE_MESSAGES: Record<string, string> = {
  nul: `execution reverted: ${NUL}boom`,
  high: `execution reverted: ${HIGH}!`,
  low: `execution reverted: ${LOW}!`,
  split: `${'m'.repeat(199)}${EMOJI} and more`,
};

function startHostileNode(): Promise<FakeUpstream> {
  const answer = ({ id, method }: { id: unknown; method: string }) => {
    const message = method.startsWith('hostile_') ? NODE_MESSAGES[method.slice('hostile_'.length)] : undefined;
    if (message !== undefined) return { jsonrpc: '2.0', id, error: { code: -32000, message } };
    return { jsonrpc: '2.0', id, result: method === 'eth_blockNumber' ? '0x10' : null };
  };
  return startFake((call) => {
    const parsed = JSON.parse(call.body) as Parameters<typeof answer>[0] | Array<Parameters<typeof answer>[0]>;
    return { body: Array.isArray(parsed) ? parsed.map(answer) : answer(parsed) };
  });
}

/** Methods callers send, and what their records hold. */
const CALLER_METHODS: Array<[sent: string, recorded: string]> = [
  [`eth_${NUL}x`, `eth_${FFFD}x`],
  [`eth_${HIGH}x`, `eth_${FFFD}x`],
  [`eth_${LOW}x`, `eth_${FFFD}x`],
  [`eth_x${HIGH}${HIGH}${LOW}`, `eth_x${FFFD}${HIGH}${LOW}`],
  // Whole in the record; the roll-ups' label keeps 120 code units, which would split the pair at 119-120.
  [`eth_${'a'.repeat(115)}${EMOJI}`, `eth_${'a'.repeat(115)}${EMOJI}`],
];

const rpc = (id: number, method: string) => ({ jsonrpc: '2.0', id, method, params: [] });

/** A store for one test app: its environment and how to drop it, or why it cannot be had here. */
interface Backend {
  name: string;
  open(): Promise<{ env: Record<string, string>; drop(): Promise<void> } | { skip: string }>;
}

const BACKENDS: Backend[] = [
  {
    name: 'PostgreSQL (DATABASE_URL)',
    async open() {
      const unavailable = await postgresUnavailable();
      if (unavailable) return { skip: unavailable };
      const db = await createTestDatabase();
      return { env: { DATABASE_URL: db.url }, drop: () => db.drop() };
    },
  },
  { name: 'the embedded default', open: async () => ({ env: {}, drop: async () => undefined }) },
];

describe.each(BACKENDS)('on $name', (backend) => {
  let node: FakeUpstream;
  let t: TestApp;
  let skip: string | null = null;
  let base = { url: '', wsBase: '' };

  let drop: () => Promise<void> = async () => undefined;

  beforeAll(async () => {
    const store = await backend.open();
    if ('skip' in store) {
      skip = store.skip;
      return;
    }
    drop = store.drop;
    node = await startHostileNode();
    t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, ...store.env } });
    base = await listen(t);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await node?.close();
    await drop();
  });

  const post = async (token: string, body: unknown) => {
    const res = await fetch(`${base.url}/local/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as unknown };
  };
  const metrics = async (auth: Record<string, string>) => (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: auth })).json();
  /** A new account's three plain calls, then their count in its metrics once projected. */
  const plainCallsProjected = async (): Promise<number> => {
    const b = await newToken(t);
    for (let i = 1; i <= 3; i++) expect((await post(b.token, rpc(i, 'eth_blockNumber'))).body).toEqual({ jsonrpc: '2.0', id: i, result: '0x10' });
    const seen = await eventually(
      () => metrics(b.auth),
      (m) => m.totals.requests === 3,
    );
    return seen.totals.requests;
  };

  it('calls and node errors with text a store cannot hold are served and metered as U+FFFD, and every account is still projected', async (context) => {
    if (skip) return context.skip(skip);
    const a = await newToken(t, { plan: 'professional' });
    let id = 0;
    // Callers' methods over HTTP: forwarded, answered by the node.
    for (const [sent] of CALLER_METHODS) expect(await post(a.token, rpc(++id, sent))).toEqual({ status: 200, body: { jsonrpc: '2.0', id, result: null } });
    // A batch: each member its own record.
    const batch = await post(a.token, [rpc(++id, `eth_${NUL}batch`), rpc(++id, 'eth_blockNumber')]);
    expect(batch.status).toBe(200);
    expect(batch.body).toHaveLength(2);
    // Nodes' error messages.
    for (const key of Object.keys(NODE_MESSAGES)) {
      const answer = await post(a.token, rpc(++id, `hostile_${key}`));
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({ id, error: { code: -32000 } });
    }
    // Over WebSocket: a caller's method, and a node's error.
    const ws = await WsClient.open(`${base.wsBase}/local/${a.token}`);
    try {
      expect(await ws.call(`eth_${NUL}ws`)).toMatchObject({ result: null });
      expect(await ws.call(`eth_${HIGH}ws`)).toMatchObject({ result: null });
      expect(await ws.call('hostile_nul')).toMatchObject({ error: { code: -32000 } });
    } finally {
      ws.close();
    }
    const served = CALLER_METHODS.length + 2 + Object.keys(NODE_MESSAGES).length + 3;

    // Another account's calls after them are projected: metering goes on for everyone.
    expect(await plainCallsProjected()).toBe(3);

    // Served = recorded: every call in the usage log, charged as any served call, its text storable
    // as the batch codec wrote it (decoded here, not through the projections' reading).
    const logged = async (): Promise<UsageRecord[]> => {
      const events = await t.runtime.store.readStream(usageStream(a.accountId));
      return events.flatMap((e) => (e.type === USAGE_BATCH_EVENT_TYPE ? (decodeUsageBatch(e.data) ?? []) : []));
    };
    const calls = await eventually(logged, (r) => r.length >= served);
    expect(calls).toHaveLength(served);
    for (const call of calls) {
      expect(call, call.method).toMatchObject({ status: 200, charged: true });
      expect(hasUnstorableText(call.method), call.method).toBe(false);
      expect(hasUnstorableText(call.errorMessage ?? ''), String(call.errorMessage)).toBe(false);
    }
    const methods = calls.map((c) => c.method);
    expect(methods).toEqual(
      expect.arrayContaining([...CALLER_METHODS.map(([, recorded]) => recorded), `eth_${FFFD}batch`, `eth_${FFFD}ws`, 'eth_blockNumber']),
    );
    const messageOf = (method: string): Array<UsageRecord['errorMessage']> => calls.filter((c) => c.method === method).map((c) => c.errorMessage);
    expect(messageOf('hostile_nul')).toEqual([`execution reverted: ${FFFD}boom`, `execution reverted: ${FFFD}boom`]);
    expect(messageOf('hostile_high')).toEqual([`execution reverted: ${FFFD}!`]);
    expect(messageOf('hostile_low')).toEqual([`execution reverted: ${FFFD}!`]);
    expect(messageOf('hostile_split')).toEqual([NODE_MESSAGES.split]);

    // The account's own metrics, error groups and exports answer, with every call counted.
    const own = await eventually(
      () => metrics(a.auth),
      (m) => m.totals.requests === served,
    );
    expect(own.totals).toMatchObject({ requests: served, errors: Object.keys(NODE_MESSAGES).length + 1 });
    // The roll-ups' label keeps 120 code units: the pair at 119-120 left out whole, not half of it as U+FFFD.
    const labels = (own.byMethod as Array<{ method: string }>).map((m) => m.method);
    expect(labels).toContain(`eth_${'a'.repeat(115)}`);
    for (const label of labels) expect(label).not.toContain(`${FFFD}a`);
    const groups = (own.errors as Array<{ method: string; message: string; count: number }>).map((e) => [e.method, e.message, e.count]);
    expect(groups).toEqual(
      expect.arrayContaining([
        ['hostile_nul', `execution reverted: ${FFFD}boom`, 2],
        ['hostile_high', `execution reverted: ${FFFD}!`, 1],
        ['hostile_low', `execution reverted: ${FFFD}!`, 1],
        // Cut to 200 before the pair, not through it.
        ['hostile_split', 'm'.repeat(199), 1],
      ]),
    );
    const exported = await t.app.inject({ method: 'GET', url: '/api/v1/exports/usage.json', headers: a.auth });
    expect(exported.statusCode).toBe(200);
    const rows = (exported.json() as { rows: Array<{ method: string }> }).rows;
    expect(rows.map((r) => r.method).sort()).toEqual([...methods].sort());
    const csv = await t.app.inject({ method: 'GET', url: '/api/v1/exports/usage.csv', headers: a.auth });
    expect(csv.statusCode).toBe(200);
    expect(csv.body).not.toContain(NUL);
    expect((await t.app.inject({ method: 'GET', url: '/api/v1/exports/usage.pdf', headers: a.auth })).statusCode).toBe(200);
  }, 30_000);

  it('a usage log written before, holding such text, is projected with U+FFFD and stops no one', async (context) => {
    if (skip) return context.skip(skip);
    const old = await newToken(t);
    const at = new Date().toISOString();
    const logged = usageCall(old.accountId, old.tokenId, at, {
      method: `eth_${NUL}old`,
      rpcErrorCode: -32000,
      errorMessage: `old ${HIGH}`,
      requestId: `old-${at}`,
    });
    await recordUsage(t.runtime, [logged]);
    const seen = await eventually(
      () => metrics(old.auth),
      (m) => m.totals.requests === 1,
    );
    expect(seen.totals.requests).toBe(1);
    expect((seen.errors as Array<{ message: string; method: string }>).map((e) => [e.method, e.message])).toEqual([[`eth_${FFFD}old`, `old ${FFFD}`]]);
    expect(await plainCallsProjected()).toBe(3);
  }, 30_000);
});

describe.each(BACKENDS)('alert webhooks on $name', (backend) => {
  let t: AlertHarness;
  let skip: string | null = null;
  let drop: () => Promise<void> = async () => undefined;
  /** A webhook endpoint that refuses each delivery with a body holding U+0000, and an emoji its cut to 200 would split. */
  let receiver: Server;
  let receiverUrl = '';

  beforeAll(async () => {
    const store = await backend.open();
    if ('skip' in store) {
      skip = store.skip;
      return;
    }
    drop = store.drop;
    receiver = createServer((_req, res) => res.writeHead(400, { 'content-type': 'text/plain' }).end(`${NUL}${'x'.repeat(198)}${EMOJI}`));
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    t = await startAlertHarness({ now: () => new Date(), requestIdPrefix: 'hostile-alert', env: store.env });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    receiver?.closeAllConnections();
    await new Promise<void>((resolve) => (receiver ? receiver.close(() => resolve()) : resolve()));
    await drop();
  });

  it("a receiver's answer with text a store cannot hold is recorded as U+FFFD, and projections go on", async (context) => {
    if (skip) return context.skip(skip);
    const a = await t.webhookAlert('hostile receiver', receiverUrl);
    await t.fire(a);
    await t.notifier.runOnce();
    await t.settle();
    const attempts = await t.attempts(a.alertId);
    expect(attempts.map((x) => [x.outcome, x.status, x.error])).toEqual([['failed', 400, `HTTP 400: ${FFFD}${'x'.repeat(198)}`]]);
    // Projected: the delivery left the queue, and another account's usage is counted.
    expect(await t.pending(a.alertId)).toEqual([]);
    const b = await t.webhookAlert('another', receiverUrl);
    await t.recordUsage(b.o.accountId, b.tokenId, [200, 200]);
    const seen = await t.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: b.o.auth });
    expect(seen.json().totals.requests).toBe(2);
  }, 30_000);
});
