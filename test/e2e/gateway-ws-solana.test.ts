import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { eventually, until } from '../support/eventually.js';
import { base58, type FakeSolanaWsUpstream, RENT_EXEMPT_EPOCH, startFakeSolanaWsUpstream } from '../support/fakeSolanaWsUpstream.js';
import { newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * Solana's pubsub through the gateway's WebSocket on `sol`: a fake Solana node (HTTP and pubsub,
 * the real node's shapes) behind a real gateway, with real tokens, plans and metering.
 */
let node: FakeSolanaWsUpstream;
let t: TestApp;
let wsBase: string;

beforeAll(async () => {
  node = await startFakeSolanaWsUpstream();
  // Free's rate high enough for a burst of subscribes (its subscription cap is what is tested).
  const plans = join(mkdtempSync(join(tmpdir(), 'ws-solana-plans-')), 'plans.json');
  writeFileSync(plans, JSON.stringify({ free: { rps: 1000 }, unlimited: { rps: 1_000_000 } }));
  t = await startTestApp({ env: { UPSTREAM_SOL: node.httpUrl, UPSTREAM_SOL_WS: node.wsUrl, PLANS_CONFIG: plans } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  wsBase = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const newToken = (plan = 'unlimited', fields: Record<string, unknown> = {}) => newOwnerToken(t, { plan, fields });
const sockets = () => t.runtime.telemetry.webSockets();

/** Every client a test opened: closed after it, pass or fail, so a failure does not leak into the next test's counts. */
const opened: WsClient[] = [];
async function open(token: string): Promise<WsClient> {
  const client = await WsClient.open(`${wsBase}/sol/${token}`);
  opened.push(client);
  return client;
}
afterEach(async () => {
  for (const c of opened.splice(0)) c.close();
  await until(() => sockets()?.connections === 0);
});

/** A public key: base58 of 32 bytes. */
const pubkey = (seed: string) => base58(createHash('sha256').update(seed).digest());
/** A transaction signature: base58 of 64 bytes. */
const signature = (seed: string) => base58(createHash('sha512').update(seed).digest());

/** The params of each `method` notification for one subscription id. */
const notifications = (client: WsClient, method: string, id: unknown) =>
  client.frames
    .filter((f) => f.method === method && (f.params as { subscription?: unknown }).subscription === id)
    .map((f) => f.params as Record<string, unknown>);

const usageMethods = async (accountId: string): Promise<string[]> => (await recordedCalls(t.runtime.store, accountId)).map((r) => r.method);

const count = (methods: string[], method: string) => methods.filter((m) => m === method).length;

/**
 * The subscribe calls the node got since `before`, once it has `n` of them: a client's subscribe
 * is answered before the node is asked (the upstream socket may still be connecting).
 */
async function subscribesSince(before: number, n: number): Promise<Array<{ method: string; params: unknown[] }>> {
  await until(() => node.subscribeCalls.length >= before + n);
  return node.subscribeCalls.slice(before);
}

/** Closes the clients and waits for the gateway to count none. */
async function closeAll(...clients: WsClient[]): Promise<void> {
  for (const c of clients) c.close();
  await until(() => sockets()?.connections === 0);
}

describe('slotSubscribe', () => {
  it('shares one upstream subscription between clients, each with its own integer id, in Solana shapes, metered per notification', async () => {
    const a = await newToken();
    const b = await newToken();
    const one = await open(a.token);
    const two = await open(b.token);
    const subscribedBefore = node.subscribeCalls.length;
    const ids = [(await one.call('slotSubscribe')).result, (await two.call('slotSubscribe')).result];
    for (const id of ids) expect(Number.isSafeInteger(id)).toBe(true);
    expect(ids[0]).not.toBe(ids[1]);
    expect(await subscribesSince(subscribedBefore, 1)).toEqual([{ method: 'slotSubscribe', params: [] }]);
    expect(sockets()).toMatchObject({ subscriptions: 2, upstreamSubscriptions: 1 });

    const slots = [node.nextSlot(), node.nextSlot()];
    await until(() => notifications(one, 'slotNotification', ids[0]).length === 2 && notifications(two, 'slotNotification', ids[1]).length === 2);
    expect(one.frames.find((f) => f.method === 'slotNotification')).toEqual({
      jsonrpc: '2.0',
      method: 'slotNotification',
      params: { subscription: ids[0], result: slots[0] },
    });
    expect(notifications(two, 'slotNotification', ids[1]).map((n) => n.result)).toEqual(slots);
    await until(async () => count(await usageMethods(a.accountId), 'slotNotification') === 2);
    expect(count(await usageMethods(a.accountId), 'slotSubscribe')).toBe(1);

    // Another connection's id is not this one's: the node's answer to an unknown id.
    expect((await two.call('slotUnsubscribe', [ids[0]])).error).toEqual({ code: -32602, message: 'Invalid subscription id.' });
    expect(await one.call('slotUnsubscribe', [ids[0]])).toMatchObject({ result: true });
    expect(node.unsubscribeCalls).toHaveLength(0);
    const last = node.nextSlot();
    await until(() => notifications(two, 'slotNotification', ids[1]).length === 3);
    expect(notifications(two, 'slotNotification', ids[1]).at(-1)?.result).toEqual(last);
    expect(await two.call('slotUnsubscribe', [ids[1]])).toMatchObject({ result: true });
    // The last client gone: the node's subscription is cancelled.
    await until(() => node.activeSubscriptions === 0);
    expect(node.unsubscribeCalls.map((c) => c.method)).toEqual(['slotUnsubscribe']);
    expect((await two.call('slotUnsubscribe', [ids[1]])).error).toMatchObject({ code: -32602 });
    expect(notifications(one, 'slotNotification', ids[0])).toHaveLength(2);
    // The unsubscribe is metered too (free of charge).
    await until(async () => count(await usageMethods(a.accountId), 'slotUnsubscribe') === 1);
    await closeAll(one, two);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  });
});

describe('rootSubscribe and slotsUpdatesSubscribe', () => {
  /**
   * Two clients (two accounts) on one no-params subscription: one upstream subscription, every
   * notification to both and metered for each, the node's subscription cancelled when the last leaves.
   */
  async function sharedNoParams(kind: 'root' | 'slotsUpdates', push: () => unknown[]): Promise<void> {
    const [subscribe, unsubscribe, notification] = [`${kind}Subscribe`, `${kind}Unsubscribe`, `${kind}Notification`];
    const [a, b] = [await newToken(), await newToken()];
    const one = await open(a.token);
    const two = await open(b.token);
    const subscribedBefore = node.subscribeCalls.length;
    const unsubscribedBefore = node.unsubscribeCalls.length;
    // Like slotSubscribe, it takes no params: refused before the node is asked.
    for (const params of [[1], [{ commitment: 'confirmed' }]])
      expect((await one.call(subscribe, params)).error, JSON.stringify(params)).toEqual({
        code: -32602,
        message: `Invalid params: ${subscribe} takes no params`,
      });
    const ids = [(await one.call(subscribe)).result, (await two.call(subscribe, [])).result];
    for (const id of ids) expect(Number.isSafeInteger(id)).toBe(true);
    expect(await subscribesSince(subscribedBefore, 1)).toEqual([{ method: subscribe, params: [] }]);
    expect(sockets()).toMatchObject({ subscriptions: 2, upstreamSubscriptions: 1 });
    await until(() => node.activeSubscriptions === 1);

    const pushed = push();
    await until(() => notifications(one, notification, ids[0]).length === pushed.length && notifications(two, notification, ids[1]).length === pushed.length);
    expect(one.frames.find((f) => f.method === notification)).toEqual({
      jsonrpc: '2.0',
      method: notification,
      params: { subscription: ids[0], result: pushed[0] },
    });
    expect(notifications(one, notification, ids[0]).map((n) => n.result)).toEqual(pushed);
    expect(notifications(two, notification, ids[1]).map((n) => n.result)).toEqual(pushed);
    for (const o of [a, b]) {
      const calls = await eventually(
        () => recordedCalls(t.runtime.store, o.accountId),
        (c) => c.length >= pushed.length + (o === a ? 3 : 1),
      );
      expect(
        count(
          calls.map((c) => c.method),
          notification,
        ),
      ).toBe(pushed.length);
      // One subscribe, and for the first client the refused ones, metered as errors as any refused call.
      const subscribes = calls.filter((r) => r.method === subscribe).map((r) => r.rpcErrorCode);
      expect(subscribes.sort()).toEqual(o === a ? [-32602, -32602, null] : [null]);
    }

    expect(await one.call(unsubscribe, [ids[0]])).toMatchObject({ result: true });
    expect(node.unsubscribeCalls.length).toBe(unsubscribedBefore);
    expect(node.activeSubscriptions).toBe(1);
    const more = push();
    await until(() => notifications(two, notification, ids[1]).length === pushed.length + more.length);
    expect(notifications(one, notification, ids[0])).toHaveLength(pushed.length);
    expect(await two.call(unsubscribe, [ids[1]])).toMatchObject({ result: true });
    // The last client gone: the node's subscription is cancelled with the kind's own unsubscribe.
    await until(() => node.activeSubscriptions === 0);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore)).toEqual([{ method: unsubscribe, params: [expect.any(Number)] }]);
    expect((await two.call(unsubscribe, [ids[1]])).error).toEqual({ code: -32602, message: 'Invalid subscription id.' });
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
    await closeAll(one, two);
  }

  it("rootSubscribe: one shared upstream subscription, each new root as the node's rootNotification (a bare slot number), metered per client", async () => {
    await sharedNoParams('root', () => [node.nextSlot().root, node.nextSlot().root]);
  });

  it('slotsUpdatesSubscribe: one shared upstream subscription, every update of every slot as the node wrote it (createdBank parent, frozen stats, dead err)', async () => {
    await sharedNoParams('slotsUpdates', () => {
      const before = node.slotUpdatesMade.length;
      node.nextSlot();
      node.deadSlot('failed to replay: InvalidTickCount');
      const made = node.slotUpdatesMade.slice(before);
      expect(made.map((u) => u.type)).toEqual(['firstShredReceived', 'completed', 'createdBank', 'frozen', 'root', 'dead']);
      return made;
    });
  });
});

describe('accountSubscribe and logsSubscribe', () => {
  it('share one upstream subscription per distinct params and deliver what the node wrote, a u64 rentEpoch exact', async () => {
    const o = await newToken();
    const one = await open(o.token);
    const two = await open(o.token);
    const rawFrames: string[] = [];
    one.ws.on('message', (data) => rawFrames.push(data.toString()));
    const alice = pubkey('alice');
    const subscribedBefore = node.subscribeCalls.length;
    const confirmed = (await one.call('accountSubscribe', [alice, { encoding: 'base64', commitment: 'confirmed' }])).result;
    // The same config with its keys in another order: the same feed.
    const confirmedToo = (await two.call('accountSubscribe', [alice, { commitment: 'confirmed', encoding: 'base64' }])).result;
    const finalized = (await two.call('accountSubscribe', [alice, { encoding: 'base64', commitment: 'finalized' }])).result;
    const mentions = (await one.call('logsSubscribe', [{ mentions: [alice] }, { commitment: 'confirmed' }])).result;
    const all = (await two.call('logsSubscribe', ['all'])).result;
    expect(await subscribesSince(subscribedBefore, 4)).toEqual([
      { method: 'accountSubscribe', params: [alice, { encoding: 'base64', commitment: 'confirmed' }] },
      { method: 'accountSubscribe', params: [alice, { encoding: 'base64', commitment: 'finalized' }] },
      { method: 'logsSubscribe', params: [{ mentions: [alice] }, { commitment: 'confirmed' }] },
      { method: 'logsSubscribe', params: ['all'] },
    ]);
    expect(sockets()).toMatchObject({ subscriptions: 5, upstreamSubscriptions: 4 });

    const slot = node.nextSlot().slot;
    node.changeAccount(alice, { lamports: 42, data: Buffer.from('hello') });
    for (const [client, id] of [
      [one, confirmed],
      [two, confirmedToo],
      [two, finalized],
    ] as const) {
      await until(() => notifications(client, 'accountNotification', id).length === 1);
      expect(notifications(client, 'accountNotification', id)[0]?.result).toMatchObject({
        context: { slot },
        value: { lamports: 42, owner: '11111111111111111111111111111111', data: ['aGVsbG8=', 'base64'], executable: false, space: 5 },
      });
    }
    expect(rawFrames.find((f) => f.includes('accountNotification'))).toContain(`"rentEpoch":${RENT_EXEMPT_EPOCH}`);

    const logs = ['Program 11111111111111111111111111111111 invoke [1]', 'Program 11111111111111111111111111111111 success'];
    node.transaction({ signature: 'sig-mentions-alice', mentions: [alice], logs });
    node.transaction({ signature: 'sig-other', mentions: [pubkey('bob')], logs });
    await until(() => notifications(two, 'logsNotification', all).length === 2);
    expect(notifications(two, 'logsNotification', all).map((n) => (n.result as { value: { signature: string } }).value.signature)).toEqual([
      'sig-mentions-alice',
      'sig-other',
    ]);
    await until(() => notifications(one, 'logsNotification', mentions).length === 1);
    expect(notifications(one, 'logsNotification', mentions)[0]?.result).toEqual({
      context: { slot },
      value: { signature: 'sig-mentions-alice', err: null, logs },
    });

    await until(async () => count(await usageMethods(o.accountId), 'logsNotification') === 3);
    const methods = await usageMethods(o.accountId);
    expect(count(methods, 'accountNotification')).toBe(3);
    expect(count(methods, 'accountSubscribe')).toBe(3);
    expect(count(methods, 'logsSubscribe')).toBe(2);
    await closeAll(one, two);
    await until(() => node.activeSubscriptions === 0);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  });
});

describe('programSubscribe', () => {
  it("shares one upstream subscription per (program, config), filters normalized, and delivers each matching account's change as {pubkey, account}", async () => {
    const o = await newToken();
    const one = await open(o.token);
    const two = await open(o.token);
    const program = pubkey('program');
    const [alice, bob] = [pubkey('alice'), pubkey('bob')];
    const subscribedBefore = node.subscribeCalls.length;
    const filters = [{ dataSize: 5 }, { memcmp: { offset: 0, bytes: base58(Buffer.from('he')) } }];
    const filtered = (await one.call('programSubscribe', [program, { encoding: 'base64', commitment: 'confirmed', filters }])).result;
    // The same config, keys in another order: the same feed.
    const filteredToo = (
      await two.call('programSubscribe', [
        program,
        { filters: [{ dataSize: 5 }, { memcmp: { bytes: base58(Buffer.from('he')), offset: 0 } }], commitment: 'confirmed', encoding: 'base64' },
      ])
    ).result;
    const every = (await two.call('programSubscribe', [program])).result;
    expect(await subscribesSince(subscribedBefore, 2)).toEqual([
      { method: 'programSubscribe', params: [program, { encoding: 'base64', commitment: 'confirmed', filters }] },
      { method: 'programSubscribe', params: [program] },
    ]);
    expect(sockets()).toMatchObject({ subscriptions: 3, upstreamSubscriptions: 2 });

    const slot = node.nextSlot().slot;
    node.changeAccount(alice, { lamports: 5, data: Buffer.from('hello'), owner: program });
    node.changeAccount(bob, { lamports: 6, data: Buffer.from('bye'), owner: program });
    node.changeAccount(pubkey('carol'), { lamports: 7, data: Buffer.from('hello') });
    await until(() => notifications(two, 'programNotification', every).length === 2);
    expect(notifications(two, 'programNotification', every).map((n) => (n.result as { value: { pubkey: string } }).value.pubkey)).toEqual([alice, bob]);
    await until(() => notifications(one, 'programNotification', filtered).length === 1 && notifications(two, 'programNotification', filteredToo).length === 1);
    expect(notifications(one, 'programNotification', filtered)[0]?.result).toEqual({
      context: { slot },
      value: {
        pubkey: alice,
        account: { lamports: 5, owner: program, data: ['aGVsbG8=', 'base64'], executable: false, rentEpoch: Number(RENT_EXEMPT_EPOCH), space: 5 },
      },
    });
    await until(async () => count(await usageMethods(o.accountId), 'programNotification') === 4);

    expect(await one.call('programUnsubscribe', [filtered])).toMatchObject({ result: true });
    expect(node.unsubscribeCalls.filter((c) => c.method === 'programUnsubscribe')).toHaveLength(0);
    expect(await two.call('programUnsubscribe', [filteredToo])).toMatchObject({ result: true });
    await until(() => node.activeSubscriptions === 1);
    expect(node.unsubscribeCalls.at(-1)?.method).toBe('programUnsubscribe');
    await until(async () => count(await usageMethods(o.accountId), 'programUnsubscribe') === 2);
    expect(count(await usageMethods(o.accountId), 'programSubscribe')).toBe(3);
    await closeAll(one, two);
    await until(() => node.activeSubscriptions === 0);
  });
});

describe('signatureSubscribe', () => {
  it('is one-shot, as on the node: two clients share one upstream subscription, each gets the status once, then every subscription ends without an unsubscribe', async () => {
    const [a, b] = [await newToken(), await newToken()];
    const one = await open(a.token);
    const two = await open(b.token);
    const sig = signature('one-shot');
    const subscribedBefore = node.subscribeCalls.length;
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const ids = [
      (await one.call('signatureSubscribe', [sig, { commitment: 'confirmed' }])).result,
      // enableReceivedNotification false is the node's default: the same feed.
      (await two.call('signatureSubscribe', [sig, { enableReceivedNotification: false, commitment: 'confirmed' }])).result,
    ];
    expect(await subscribesSince(subscribedBefore, 1)).toEqual([{ method: 'signatureSubscribe', params: [sig, { commitment: 'confirmed' }] }]);
    expect(sockets()).toMatchObject({ subscriptions: 2, upstreamSubscriptions: 1 });

    const slot = node.nextSlot().slot;
    node.processSignature(sig);
    await until(() => notifications(one, 'signatureNotification', ids[0]).length === 1 && notifications(two, 'signatureNotification', ids[1]).length === 1);
    expect(one.frames.find((f) => f.method === 'signatureNotification')).toEqual({
      jsonrpc: '2.0',
      method: 'signatureNotification',
      params: { subscription: ids[0], result: { context: { slot }, value: { err: null } } },
    });
    // Ended by the node, so by the gateway: no client holds it, nor the gateway the node's.
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    expect(node.activeSubscriptions).toBe(0);
    // The node ended it: the gateway does not ask it to cancel what it no longer has.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(node.unsubscribeCalls.slice(unsubscribedBefore)).toEqual([]);
    // As on the node: the id is no longer one.
    expect((await one.call('signatureUnsubscribe', [ids[0]])).error).toEqual({ code: -32602, message: 'Invalid subscription id.' });
    for (const o of [a, b]) {
      await until(async () => count(await usageMethods(o.accountId), 'signatureNotification') === 1);
      expect(count(await usageMethods(o.accountId), 'signatureSubscribe')).toBe(1);
    }

    // The ended feed is forgotten: the same signature again is a new subscription at the node.
    const again = (await one.call('signatureSubscribe', [sig, { commitment: 'confirmed' }])).result;
    expect(await subscribesSince(subscribedBefore, 2)).toHaveLength(2);
    await until(() => node.activeSubscriptions === 1);
    node.processSignature(sig, { err: { InstructionError: [0, 'Custom'] } });
    await until(() => notifications(one, 'signatureNotification', again).length === 1);
    expect(notifications(one, 'signatureNotification', again)[0]?.result).toMatchObject({ value: { err: { InstructionError: [0, 'Custom'] } } });
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    await closeAll(one, two);
  });

  it('delivers nothing after the status, even from a node that sends again, and meters only what it delivered', async () => {
    const o = await newToken();
    const client = await open(o.token);
    const sig = signature('sent-twice');
    const slotId = (await client.call('slotSubscribe')).result;
    const id = (await client.call('signatureSubscribe', [sig])).result;
    await until(() => node.activeSubscriptions === 2);
    const { slot } = node.nextSlot();
    // Two statuses for one subscription in one go: the second reaches the gateway before anything it sends the node.
    node.processSignature(sig, { keepSubscriptions: true });
    node.processSignature(sig, { err: 'AccountInUse', keepSubscriptions: true });
    // The slot after them, over the same node socket: once it is here, so would the second status be.
    const after = node.nextSlot();
    await until(() => notifications(client, 'slotNotification', slotId).length === 2);
    expect(notifications(client, 'slotNotification', slotId).at(-1)?.result).toEqual(after);
    expect(notifications(client, 'signatureNotification', id).map((n) => n.result)).toEqual([{ context: { slot }, value: { err: null } }]);
    expect(sockets()).toMatchObject({ subscriptions: 1, upstreamSubscriptions: 1 });
    await until(async () => count(await usageMethods(o.accountId), 'slotNotification') === 2);
    expect(count(await usageMethods(o.accountId), 'signatureNotification')).toBe(1);
    await closeAll(client);
    await until(() => node.activeSubscriptions === 0);
  });

  it('ends before the status on signatureUnsubscribe, and with enableReceivedNotification delivers "receivedSignature" and goes on to the status', async () => {
    const o = await newToken();
    const client = await open(o.token);
    const [early, late] = [signature('unsubscribed-early'), signature('received-first')];
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const earlyId = (await client.call('signatureSubscribe', [early])).result;
    await until(() => node.activeSubscriptions === 1);
    expect(await client.call('signatureUnsubscribe', [earlyId])).toMatchObject({ result: true });
    await until(() => node.activeSubscriptions === 0);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore).map((c) => c.method)).toEqual(['signatureUnsubscribe']);

    const lateId = (await client.call('signatureSubscribe', [late, { enableReceivedNotification: true }])).result;
    await until(() => node.activeSubscriptions === 1);
    node.receiveSignature(late);
    await until(() => notifications(client, 'signatureNotification', lateId).length === 1);
    expect(sockets()).toMatchObject({ subscriptions: 1, upstreamSubscriptions: 1 });
    node.processSignature(late);
    await until(() => notifications(client, 'signatureNotification', lateId).length === 2);
    expect(notifications(client, 'signatureNotification', lateId).map((n) => (n.result as { value: unknown }).value)).toEqual([
      'receivedSignature',
      { err: null },
    ]);
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    await until(async () => count(await usageMethods(o.accountId), 'signatureNotification') === 2);
    await closeAll(client);
  });
});

describe('bad input', () => {
  it('answers malformed params with -32602 and subscriptions it does not offer with -32601, without asking the node; the socket stays open', async () => {
    const { token } = await newToken();
    const client = await open(token);
    const alice = pubkey('alice');
    const subscribedBefore = node.subscribeCalls.length;
    const invalid: Array<[string, unknown[]]> = [
      ['slotSubscribe', [1]],
      ['rootSubscribe', [1]],
      ['slotsUpdatesSubscribe', [{}]],
      ['rootUnsubscribe', ['1']],
      ['accountSubscribe', []],
      ['accountSubscribe', ['0OIl-not-base58']],
      ['accountSubscribe', [base58(Buffer.alloc(31, 7))]],
      ['accountSubscribe', [alice, { encoding: 'hex' }]],
      ['accountSubscribe', [alice, { commitment: 'recent' }]],
      ['accountSubscribe', [alice, 'base64']],
      ['logsSubscribe', []],
      ['logsSubscribe', ['everything']],
      ['logsSubscribe', [{ mentions: [alice, pubkey('bob')] }]],
      ['logsSubscribe', [{ mentions: ['x'] }]],
      ['logsSubscribe', ['all', { encoding: 'base64' }]],
      ['programSubscribe', []],
      ['programSubscribe', ['not-a-key']],
      ['programSubscribe', [alice, { filters: [{ dataSize: -1 }] }]],
      ['programSubscribe', [alice, { filters: [{ memcmp: { offset: 0, bytes: '0OIl' } }] }]],
      ['programSubscribe', [alice, { filters: Array.from({ length: 5 }, () => ({ dataSize: 1 })) }]],
      ['programSubscribe', [alice, { dataSlice: { offset: 0, length: 1 } }]],
      ['signatureSubscribe', [alice]],
      ['signatureSubscribe', [signature('x'), { enableReceivedNotification: 'yes' }]],
      ['signatureSubscribe', [signature('x'), { encoding: 'base64' }]],
      ['slotUnsubscribe', ['1']],
      ['accountUnsubscribe', []],
    ];
    for (const [method, params] of invalid) {
      const answer = await client.call(method, params);
      expect(answer.error, `${method} ${JSON.stringify(params)}`).toMatchObject({ code: -32602, message: expect.stringMatching(/^Invalid params: /) });
    }
    // A node serves these only with unstable flags: not offered.
    for (const method of ['blockSubscribe', 'voteSubscribe', 'blockUnsubscribe', 'voteUnsubscribe']) {
      expect((await client.call(method, [alice])).error, method).toMatchObject({ code: -32601, message: expect.stringContaining('rootSubscribe') });
    }
    expect(node.subscribeCalls.length).toBe(subscribedBefore);
    expect(client.closed).toBeNull();
    // Ordinary calls go through as over HTTP, and a good subscription still opens.
    expect(await client.call('getSlot')).toMatchObject({ result: expect.any(Number) });
    expect(await client.call('slotSubscribe')).toMatchObject({ result: expect.any(Number) });
    await closeAll(client);
  });
});

describe('plans', () => {
  it("counts Solana subscriptions against the plan's subscriptions per connection (Free: 10)", async () => {
    const { token } = await newToken('free');
    const client = await open(token);
    const answers = [
      ...(await Promise.all(Array.from({ length: 4 }, (_, i) => client.call('accountSubscribe', [pubkey(`cap-${i}`)])))),
      ...(await Promise.all(Array.from({ length: 4 }, () => client.call('slotSubscribe')))),
      ...(await Promise.all(Array.from({ length: 4 }, () => client.call('logsSubscribe', ['all'])))),
    ];
    // Frames are checked in the order they arrive: the first ten open, the last two are refused.
    for (const answer of answers.slice(0, 10)) expect(answer.result).toEqual(expect.any(Number));
    expect(answers.slice(10).map((a) => a.error)).toEqual([
      expect.objectContaining({ code: -32005, message: expect.stringContaining('10') }),
      expect.objectContaining({ code: -32005, message: expect.stringContaining('10') }),
    ]);
    expect(sockets()?.subscriptions).toBe(10);
    // One ended makes room for one more.
    expect(await client.call('accountUnsubscribe', [answers[0]?.result])).toMatchObject({ result: true });
    expect(await client.call('slotSubscribe')).toMatchObject({ result: expect.any(Number) });
    await closeAll(client);
  });

  it('frees the room of a signature subscription the node ended (its status delivered), as an unsubscribe does', async () => {
    const { token } = await newToken('free');
    const client = await open(token);
    const sigs = Array.from({ length: 11 }, (_, i) => signature(`cap-sig-${i}`));
    const answers = await Promise.all(sigs.map((sig) => client.call('signatureSubscribe', [sig])));
    for (const answer of answers.slice(0, 10)) expect(answer.result).toEqual(expect.any(Number));
    expect(answers[10]?.error).toMatchObject({ code: -32005 });
    await until(() => node.activeSubscriptions === 10);
    node.processSignature(sigs[0] as string);
    await until(() => notifications(client, 'signatureNotification', answers[0]?.result).length === 1);
    await until(() => sockets()?.subscriptions === 9);
    expect(await client.call('signatureSubscribe', [sigs[10]])).toMatchObject({ result: expect.any(Number) });
    expect((await client.call('signatureSubscribe', [signature('cap-sig-12')])).error).toMatchObject({ code: -32005 });
    await closeAll(client);
    await until(() => node.activeSubscriptions === 0);
  });

  it('ends every subscription with an error notification in its own method when the monthly quota runs out, then closes with 4029', async () => {
    // Developer allows a token's own limit: 3 calls, two of them the subscribes, then one slot.
    const { token } = await newToken('developer', { monthly_limit: 3 });
    const client = await open(token);
    const slotId = (await client.call('slotSubscribe')).result;
    const logsId = (await client.call('logsSubscribe', ['all'])).result;
    node.nextSlot();
    await until(() => notifications(client, 'slotNotification', slotId).length === 1);
    node.nextSlot();
    expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
    expect(notifications(client, 'slotNotification', slotId).at(-1)?.error).toMatchObject({ code: -32005 });
    expect(notifications(client, 'logsNotification', logsId).at(-1)?.error).toMatchObject({ code: -32005 });
    await until(() => sockets()?.connections === 0);
  });
});

describe('the node dropping the socket', () => {
  it('reconnects and resubscribes every subscription with its params; clients keep their ids', async () => {
    const { token } = await newToken();
    const client = await open(token);
    const alice = pubkey('alice');
    const wanted = [
      { method: 'slotSubscribe', params: [] },
      { method: 'accountSubscribe', params: [alice, { encoding: 'base58' }] },
      { method: 'logsSubscribe', params: [{ mentions: [alice] }] },
    ];
    const [slotId, accountId, logsId] = await Promise.all(wanted.map(async (w) => (await client.call(w.method, w.params)).result));
    // Counted once the node holds all three (the answers came before it was asked).
    await until(() => node.activeSubscriptions === 3);
    const connections = node.connectionsAccepted;
    const subscribedBefore = node.subscribeCalls.length;
    node.drop();
    await until(() => node.subscribeCalls.length === subscribedBefore + 3);
    expect(node.connectionsAccepted).toBe(connections + 1);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual(expect.arrayContaining(wanted));
    await until(() => node.activeSubscriptions === 3);

    const slot = node.nextSlot();
    node.changeAccount(alice, { lamports: 7, data: Buffer.from([0, 1, 2]) });
    node.transaction({ signature: 'after-the-drop', mentions: [alice], logs: [] });
    await until(
      () =>
        notifications(client, 'slotNotification', slotId).length === 1 &&
        notifications(client, 'accountNotification', accountId).length === 1 &&
        notifications(client, 'logsNotification', logsId).length === 1,
    );
    expect(notifications(client, 'slotNotification', slotId)[0]?.result).toEqual(slot);
    expect(notifications(client, 'accountNotification', accountId)[0]?.result).toMatchObject({ value: { data: [base58(Buffer.from([0, 1, 2])), 'base58'] } });
    expect(sockets()).toMatchObject({ subscriptions: 3, upstreamSubscriptions: 3 });
    await closeAll(client);
    await until(() => node.activeSubscriptions === 0);
  });
});

describe('a signature status reached while the socket to the node was down', () => {
  it("is fetched on reconnect and delivered once in the node's shape to every client, ending their subscriptions as the node would", async () => {
    const [a, b] = [await newToken(), await newToken()];
    const one = await open(a.token);
    const two = await open(b.token);
    const sig = signature('processed-while-down');
    const ids = [
      (await one.call('signatureSubscribe', [sig, { commitment: 'confirmed' }])).result,
      (await two.call('signatureSubscribe', [sig, { commitment: 'confirmed' }])).result,
    ];
    await until(() => node.activeSubscriptions === 1);
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const asked = node.socketCalls.length;
    node.drop();
    // The node processes it with no socket to notify; the resubscription will not notify it either.
    const err = { InstructionError: [0, { Custom: 1 }] };
    node.processSignature(sig, { err });
    const { slot } = node.nextSlot();
    await until(() => notifications(one, 'signatureNotification', ids[0]).length === 1 && notifications(two, 'signatureNotification', ids[1]).length === 1);
    expect(node.socketCalls.slice(asked)).toEqual([{ method: 'getSignatureStatuses', params: [[sig], { searchTransactionHistory: false }] }]);
    expect(one.frames.find((f) => f.method === 'signatureNotification')).toEqual({
      jsonrpc: '2.0',
      method: 'signatureNotification',
      params: { subscription: ids[0], result: { context: { slot }, value: { err } } },
    });
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(notifications(one, 'signatureNotification', ids[0])).toHaveLength(1);
    expect(notifications(two, 'signatureNotification', ids[1])).toHaveLength(1);
    // The node did not end its subscription (made after the reconnect, it never notifies a status reached before): the gateway cancels it.
    await until(() => node.unsubscribeCalls.length > unsubscribedBefore);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore).map((c) => c.method)).toEqual(['signatureUnsubscribe']);
    expect(node.activeSubscriptions).toBe(0);
    expect((await one.call('signatureUnsubscribe', [ids[0]])).error).toEqual({ code: -32602, message: 'Invalid subscription id.' });
    for (const o of [a, b]) {
      await until(async () => count(await usageMethods(o.accountId), 'signatureNotification') === 1);
      expect(count(await usageMethods(o.accountId), 'signatureNotification')).toBe(1);
    }
    await closeAll(one, two);
    await until(() => node.activeSubscriptions === 0);
  });

  it("delivers nothing when the status has not reached the subscription's commitment (finalized by default), and the subscription stays open", async () => {
    const o = await newToken();
    const client = await open(o.token);
    const [processedOnly, confirmedOnly, unknown] = [signature('processed-only'), signature('confirmed-only'), signature('not-seen')];
    const slotId = (await client.call('slotSubscribe')).result;
    const ids = [
      (await client.call('signatureSubscribe', [processedOnly, { commitment: 'confirmed' }])).result,
      (await client.call('signatureSubscribe', [confirmedOnly])).result,
      (await client.call('signatureSubscribe', [unknown, { commitment: 'processed' }])).result,
    ];
    await until(() => node.activeSubscriptions === 4);
    const asked = node.socketCalls.length;
    node.drop();
    node.processSignature(processedOnly, { confirmationStatus: 'processed' });
    node.processSignature(confirmedOnly, { confirmationStatus: 'confirmed' });
    await until(() => node.socketCalls.length === asked + 3 && node.activeSubscriptions === 4);
    // Over the same node socket after the answers: once this slot is here, so would be any notification made of them.
    node.nextSlot();
    await until(() => notifications(client, 'slotNotification', slotId).length === 1);
    for (const id of ids) expect(notifications(client, 'signatureNotification', id)).toEqual([]);
    expect(sockets()).toMatchObject({ subscriptions: 4, upstreamSubscriptions: 4 });
    expect(count(await usageMethods(o.accountId), 'signatureNotification')).toBe(0);

    // Still open: the node's own notification comes through and ends it.
    node.processSignature(processedOnly);
    await until(() => notifications(client, 'signatureNotification', ids[0]).length === 1);
    await until(() => sockets()?.subscriptions === 3);
    await closeAll(client);
    await until(() => node.activeSubscriptions === 0);
  });
});

describe('sol without a WebSocket URL for its nodes', () => {
  it('serves calls over the socket and answers subscribe calls with -32601', async () => {
    const plain = await startTestApp({ env: { UPSTREAM_SOL: node.httpUrl } });
    try {
      await plain.app.listen({ port: 0, host: '127.0.0.1' });
      const address = plain.app.server.address();
      const { token } = await newOwnerToken(plain);
      const client = await WsClient.open(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/sol/${token}`);
      expect(await client.call('getSlot')).toMatchObject({ result: expect.any(Number) });
      expect((await client.call('slotSubscribe')).error).toMatchObject({ code: -32601, message: expect.stringContaining('no WebSocket endpoint') });
      client.close();
    } finally {
      await plain.close();
    }
  });
});
