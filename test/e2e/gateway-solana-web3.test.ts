import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { type AccountInfo, Connection, type Context, type KeyedAccountInfo, PublicKey, type SlotInfo, type SlotUpdate, SystemProgram } from '@solana/web3.js';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { eventually, until } from '../support/eventually.js';
import { base58, blockhashOf, type FakeSolanaWsUpstream, RENT_EXEMPT_EPOCH, startFakeSolanaWsUpstream } from '../support/fakeSolanaWsUpstream.js';
import { newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * Solana's own client, `Connection` of @solana/web3.js v1, through the gateway on `sol` with the
 * token in the path: JSON-RPC over HTTP on `/sol/<token>` and its pubsub over the WebSocket of
 * the same URL, to a fake Solana node (HTTP and pubsub, the real node's shapes).
 */
let node: FakeSolanaWsUpstream;
let t: TestApp;
let httpBase: string;
let wsBase: string;

beforeAll(async () => {
  node = await startFakeSolanaWsUpstream();
  t = await startTestApp({ env: { UPSTREAM_SOL: node.httpUrl, UPSTREAM_SOL_WS: node.wsUrl } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  httpBase = `http://127.0.0.1:${port}`;
  wsBase = `ws://127.0.0.1:${port}`;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const sockets = () => t.runtime.telemetry.webSockets();
afterEach(async () => {
  // web3.js closes its socket itself once no listener is left.
  await until(() => sockets()?.connections === 0);
});

/** Developer: every chain, and room for web3.js's bursts. */
const newToken = () => newOwnerToken(t, { plan: 'developer' });
const connect = (token: string) => new Connection(`${httpBase}/sol/${token}`, { wsEndpoint: `${wsBase}/sol/${token}`, commitment: 'confirmed' });
const pubkey = (seed: string) => new PublicKey(createHash('sha256').update(seed).digest());

const usageMethods = async (accountId: string): Promise<string[]> => (await recordedCalls(t.runtime.store, accountId)).map((r) => r.method);
const count = (methods: string[], method: string) => methods.filter((m) => m === method).length;
const monthUsage = async (o: { tokenId: string; auth: Record<string, string> }): Promise<number> =>
  (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth })).json().current_month_usage as number;

describe('Connection over HTTP', () => {
  it('reads the slot, a balance and the latest blockhash, each call metered', async () => {
    const o = await newToken();
    const connection = connect(o.token);
    const alice = pubkey('alice');
    const { slot } = node.nextSlot();
    node.changeAccount(alice.toBase58(), { lamports: 1_234_567_890 });

    expect(await connection.getSlot()).toBe(slot);
    expect(await connection.getBalance(alice)).toBe(1_234_567_890);
    expect(await connection.getBalance(pubkey('nobody'))).toBe(0);
    expect(await connection.getLatestBlockhash()).toEqual({ blockhash: blockhashOf(slot), lastValidBlockHeight: slot + 150 });

    expect(
      await eventually(
        () => usageMethods(o.accountId),
        (m) => m.length >= 4,
      ),
    ).toEqual(['getSlot', 'getBalance', 'getBalance', 'getLatestBlockhash']);
    expect(
      await eventually(
        () => monthUsage(o),
        (n) => n >= 4,
      ),
    ).toBe(4);
  });

  it("surfaces the gateway's refusal of a revoked token and of an unknown one", async () => {
    const o = await newToken();
    const connection = connect(o.token);
    expect(await connection.getSlot()).toEqual(expect.any(Number));
    expect((await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth })).statusCode).toBe(200);
    await until(async () => (await fetch(`${httpBase}/sol/${o.token}`, { method: 'POST', body: '{}' })).status === 401);
    await expect(connection.getSlot()).rejects.toThrow(/401 Unauthorized: .*revoked/);
    await expect(connect('not-a-token').getBalance(pubkey('alice'))).rejects.toThrow(/401 Unauthorized: /);
  });
});

describe('Connection over WebSocket', () => {
  it('follows slots and an account, decodes what the node wrote (u64::MAX rentEpoch included), and unsubscribes', async () => {
    const o = await newToken();
    const connection = connect(o.token);
    const alice = pubkey('alice');
    const slots: SlotInfo[] = [];
    const changes: Array<[AccountInfo<Buffer>, Context]> = [];
    const subscribedBefore = node.subscribeCalls.length;
    const slotListener = connection.onSlotChange((s) => slots.push(s));
    const accountListener = connection.onAccountChange(alice, (info, context) => changes.push([info, context]));
    await until(() => sockets()?.subscriptions === 2 && node.activeSubscriptions === 2);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual(
      expect.arrayContaining([
        { method: 'slotSubscribe', params: [] },
        { method: 'accountSubscribe', params: [alice.toBase58(), { encoding: 'base64', commitment: 'confirmed' }] },
      ]),
    );

    const pushed = [node.nextSlot(), node.nextSlot()];
    await until(() => slots.length === 2);
    expect(slots).toEqual(pushed);
    node.changeAccount(alice.toBase58(), { lamports: 42, data: Buffer.from('hello') });
    await until(() => changes.length === 1);
    const [info, context] = changes[0] as [AccountInfo<Buffer>, Context];
    expect(context).toEqual({ slot: pushed[1]?.slot });
    expect(info.lamports).toBe(42);
    expect(info.data).toEqual(Buffer.from('hello'));
    expect(info.owner.equals(SystemProgram.programId)).toBe(true);
    expect(info.executable).toBe(false);
    // JSON.parse rounds u64::MAX to the nearest double: what web3.js gives any caller of a real node.
    expect(info.rentEpoch).toBe(Number(RENT_EXEMPT_EPOCH));

    await connection.removeSlotChangeListener(slotListener);
    await until(() => node.unsubscribeCalls.length > 0);
    expect(node.unsubscribeCalls.map((c) => c.method)).toEqual(['slotUnsubscribe']);
    expect(sockets()).toMatchObject({ subscriptions: 1, upstreamSubscriptions: 1 });
    node.nextSlot();
    node.changeAccount(alice.toBase58(), { lamports: 43 });
    await until(() => changes.length === 2);
    expect(slots).toHaveLength(2);
    await connection.removeAccountChangeListener(accountListener);
    await until(() => node.activeSubscriptions === 0 && sockets()?.connections === 0);

    const methods = await eventually(
      () => usageMethods(o.accountId),
      (m) => count(m, 'accountUnsubscribe') === 1,
    );
    // Notifications and calls reach the usage stream in no fixed order between them.
    expect([...methods].sort()).toEqual(
      [
        'slotSubscribe',
        'accountSubscribe',
        'slotNotification',
        'slotNotification',
        'accountNotification',
        'slotUnsubscribe',
        'accountNotification',
        'accountUnsubscribe',
      ].sort(),
    );
    // The subscribes and notifications count against the month; the unsubscribes are free.
    expect(
      await eventually(
        () => monthUsage(o),
        (n) => n >= 6,
      ),
    ).toBe(6);
  });

  it("shares one upstream slot subscription between two clients' Connections, dropped when the last one stops listening", async () => {
    const [a, b] = [await newToken(), await newToken()];
    const [one, two] = [connect(a.token), connect(b.token)];
    const seen: [number[], number[]] = [[], []];
    const subscribedBefore = node.subscribeCalls.length;
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const listeners = [one.onSlotChange((s) => seen[0].push(s.slot)), two.onSlotChange((s) => seen[1].push(s.slot))];
    // The gateway counts a client's subscription at once; the node's subscribe follows the upstream socket's open.
    await until(() => sockets()?.subscriptions === 2 && node.activeSubscriptions === 1);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual([{ method: 'slotSubscribe', params: [] }]);
    expect(sockets()).toMatchObject({ connections: 2, upstreamSubscriptions: 1 });

    const { slot } = node.nextSlot();
    await until(() => seen[0].length === 1 && seen[1].length === 1);
    expect(seen).toEqual([[slot], [slot]]);
    await one.removeSlotChangeListener(listeners[0] as number);
    await until(() => sockets()?.subscriptions === 1);
    expect(node.unsubscribeCalls.length).toBe(unsubscribedBefore);
    const next = node.nextSlot().slot;
    await until(() => seen[1].length === 2);
    expect(seen).toEqual([[slot], [slot, next]]);
    await two.removeSlotChangeListener(listeners[1] as number);
    await until(() => node.activeSubscriptions === 0);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore).map((c) => c.method)).toEqual(['slotUnsubscribe']);
    expect(sockets()?.upstreamSubscriptions).toBe(0);
  });
});

describe('Connection following roots and slot updates', () => {
  it("onRootChange and onSlotUpdate receive the node's notifications; two Connections share one upstream subscription each, dropped when the last listener goes", async () => {
    const [a, b] = [await newToken(), await newToken()];
    const [one, two] = [connect(a.token), connect(b.token)];
    const roots: [number[], number[]] = [[], []];
    const updates: [SlotUpdate[], SlotUpdate[]] = [[], []];
    const subscribedBefore = node.subscribeCalls.length;
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const rootListeners = [one.onRootChange((r) => roots[0].push(r)), two.onRootChange((r) => roots[1].push(r))];
    const updateListeners = [one.onSlotUpdate((u) => updates[0].push(u)), two.onSlotUpdate((u) => updates[1].push(u))];
    await until(() => sockets()?.subscriptions === 4 && node.activeSubscriptions === 2);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual(
      expect.arrayContaining([
        { method: 'rootSubscribe', params: [] },
        { method: 'slotsUpdatesSubscribe', params: [] },
      ]),
    );
    expect(node.subscribeCalls.slice(subscribedBefore)).toHaveLength(2);
    expect(sockets()).toMatchObject({ connections: 2, upstreamSubscriptions: 2 });

    const madeBefore = node.slotUpdatesMade.length;
    const { root } = node.nextSlot();
    node.deadSlot('failed to replay');
    const made = node.slotUpdatesMade.slice(madeBefore);
    await until(() => roots.every((r) => r.length === 1) && updates.every((u) => u.length === made.length));
    expect(roots).toEqual([[root], [root]]);
    // Every variant web3.js knows, decoded from the node's shape (createdBank's parent, frozen's stats, dead's err).
    expect(updates).toEqual([made, made]);
    expect(made.map((u) => u.type)).toEqual(['firstShredReceived', 'completed', 'createdBank', 'frozen', 'root', 'dead']);

    await one.removeRootChangeListener(rootListeners[0] as number);
    await one.removeSlotUpdateListener(updateListeners[0] as number);
    await until(() => sockets()?.subscriptions === 2);
    expect(node.unsubscribeCalls.length).toBe(unsubscribedBefore);
    const next = node.nextSlot().root;
    await until(() => roots[1].length === 2);
    expect(roots).toEqual([[root], [root, next]]);
    await two.removeRootChangeListener(rootListeners[1] as number);
    await two.removeSlotUpdateListener(updateListeners[1] as number);
    await until(() => node.activeSubscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore).map((c) => c.method)).toEqual(
      expect.arrayContaining(['rootUnsubscribe', 'slotsUpdatesUnsubscribe']),
    );
    expect(node.unsubscribeCalls.slice(unsubscribedBefore)).toHaveLength(2);

    // Each Connection's notifications are metered to its own account.
    const methods = await eventually(
      () => usageMethods(a.accountId),
      (m) => count(m, 'slotsUpdatesUnsubscribe') === 1 && count(m, 'slotsUpdatesNotification') === made.length,
    );
    expect(count(methods, 'rootNotification')).toBe(1);
    expect(count(methods, 'rootSubscribe')).toBe(1);
    expect(count(methods, 'rootUnsubscribe')).toBe(1);
    expect(
      await eventually(
        () => usageMethods(b.accountId),
        (m) => count(m, 'rootNotification') === 2,
      ),
    ).toEqual(expect.arrayContaining(['rootSubscribe', 'slotsUpdatesSubscribe']));
  });
});

describe('Connection confirming a transaction and following a program', () => {
  it('confirmTransaction resolves on the signature notification (signatureSubscribe, one-shot: web3.js sends no unsubscribe)', async () => {
    const o = await newToken();
    const connection = connect(o.token);
    const signature = base58(createHash('sha512').update('a transfer').digest());
    const { blockhash, lastValidBlockHeight } = await connection.getLatestBlockhash();
    const statusesBefore = count(node.httpMethods, 'getSignatureStatuses');
    const subscribedBefore = node.subscribeCalls.length;
    const confirming = connection.confirmTransaction({ signature, blockhash, lastValidBlockHeight }, 'confirmed');
    // Subscribed, web3.js asks the status once (not landed yet: null), then waits for the notification.
    await until(() => node.activeSubscriptions === 1 && count(node.httpMethods, 'getSignatureStatuses') === statusesBefore + 1);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual([{ method: 'signatureSubscribe', params: [signature, { commitment: 'confirmed' }] }]);
    const { slot } = node.nextSlot();
    const pushedAt = performance.now();
    node.processSignature(signature);
    expect(await confirming).toEqual({ context: { slot }, value: { err: null } });
    // At once, not by its block-height polling (each second) nor by the blockhash expiring.
    expect(performance.now() - pushedAt).toBeLessThan(500);
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0 && node.activeSubscriptions === 0);

    const methods = await eventually(
      () => usageMethods(o.accountId),
      (m) => m.includes('signatureNotification'),
    );
    expect(count(methods, 'signatureSubscribe')).toBe(1);
    expect(count(methods, 'signatureNotification')).toBe(1);
    expect(methods).not.toContain('signatureUnsubscribe');
  });

  it('onProgramAccountChange receives the accounts of a program its filters pass, decoded; removing it unsubscribes', async () => {
    const o = await newToken();
    const connection = connect(o.token);
    const program = pubkey('a program');
    const [alice, bob] = [pubkey('alice'), pubkey('bob')];
    const changes: Array<[KeyedAccountInfo, Context]> = [];
    const subscribedBefore = node.subscribeCalls.length;
    const unsubscribedBefore = node.unsubscribeCalls.length;
    const listener = connection.onProgramAccountChange(program, (keyed, context) => changes.push([keyed, context]), {
      commitment: 'confirmed',
      filters: [{ dataSize: 5 }],
    });
    await until(() => sockets()?.subscriptions === 1 && node.activeSubscriptions === 1);
    expect(node.subscribeCalls.slice(subscribedBefore)).toEqual([
      { method: 'programSubscribe', params: [program.toBase58(), { commitment: 'confirmed', encoding: 'base64', filters: [{ dataSize: 5 }] }] },
    ]);

    const { slot } = node.nextSlot();
    node.changeAccount(bob.toBase58(), { lamports: 1, data: Buffer.from('no'), owner: program.toBase58() });
    node.changeAccount(alice.toBase58(), { lamports: 99, data: Buffer.from('hello'), owner: program.toBase58() });
    await until(() => changes.length === 1);
    const [keyed, context] = changes[0] as [KeyedAccountInfo, Context];
    expect(context).toEqual({ slot });
    expect(keyed.accountId.equals(alice)).toBe(true);
    expect(keyed.accountInfo.lamports).toBe(99);
    expect(keyed.accountInfo.data).toEqual(Buffer.from('hello'));
    expect(keyed.accountInfo.owner.equals(program)).toBe(true);

    await connection.removeProgramAccountChangeListener(listener);
    await until(() => node.activeSubscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    expect(node.unsubscribeCalls.slice(unsubscribedBefore).map((c) => c.method)).toEqual(['programUnsubscribe']);
    const methods = await eventually(
      () => usageMethods(o.accountId),
      (m) => m.includes('programUnsubscribe'),
    );
    expect([...methods].sort()).toEqual(['programSubscribe', 'programNotification', 'programUnsubscribe'].sort());
  });
});

describe("web3.js's heartbeat", () => {
  it('is read as a keepalive, as a Solana node does: not answered, not sent to the node, not metered', async () => {
    const o = await newToken();
    const connection = connect(o.token);
    // web3.js (over ws, the module the gateway uses too) sends {"jsonrpc":"2.0","method":"ping"} every 5 s while its socket is open.
    const sent = vi.spyOn(WebSocket.prototype, 'send');
    const pings = () => sent.mock.calls.filter(([frame]) => typeof frame === 'string' && /"method":"ping"/.test(frame)).length;
    const slots: number[] = [];
    try {
      const listener = connection.onSlotChange((s) => slots.push(s.slot));
      await until(() => sockets()?.subscriptions === 1);
      await until(() => pings() === 1, 8000);
      // The socket still serves after it, and what it did is in the usage stream by the notification's record.
      const { slot } = node.nextSlot();
      await until(() => slots.length === 1);
      expect(slots).toEqual([slot]);
      await connection.removeSlotChangeListener(listener);
    } finally {
      sent.mockRestore();
    }
    const methods = await eventually(
      () => usageMethods(o.accountId),
      (m) => m.includes('slotUnsubscribe'),
    );
    expect(methods).toEqual(['slotSubscribe', 'slotNotification', 'slotUnsubscribe']);
    expect(node.httpMethods).not.toContain('ping');
    expect(
      await eventually(
        () => monthUsage(o),
        (n) => n >= 2,
      ),
    ).toBe(2);
  });
});
