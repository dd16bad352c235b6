import { createHash } from 'node:crypto';
import { type AccountInfo, Connection, PublicKey } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { eventually, until } from '../support/eventually.js';
import { blockhashOf, type FakeSolanaWsUpstream, startFakeSolanaWsUpstream } from '../support/fakeSolanaWsUpstream.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * The shipped `sol` chain names its methods (`allowedMethods`, docs/decisions.md "Solana's
 * methods are a list"): a method outside it, a typo such as `getBalanse`, is the gateway's
 * refusal, which reaches no node and uses no quota, on every form a call takes (a JSON-RPC POST,
 * a batch member, the REST `GET /sol/<token>/<method>`, a WebSocket frame); what @solana/web3.js
 * sends still goes through. The whole service, on the shipped registry, before a fake Solana node.
 */
let node: FakeSolanaWsUpstream;
let t: TestApp;
let base: string;
let wsBase: string;

beforeAll(async () => {
  node = await startFakeSolanaWsUpstream();
  t = await startTestApp({ env: { UPSTREAM_SOL: node.httpUrl, UPSTREAM_SOL_WS: node.wsUrl } });
  ({ url: base, wsBase } = await listen(t));
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

type Caller = Awaited<ReturnType<typeof newToken>>;
const fresh = (): Promise<Caller> => newToken(t, { plan: 'developer' });
const pubkey = (seed: string) => new PublicKey(createHash('sha256').update(seed).digest());
const post = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** The account's usage records once there are `count`: method, status, JSON-RPC code, charged. */
const records = async (o: Caller, count: number): Promise<Array<[string, number, number | null, boolean | undefined]>> =>
  (
    await eventually(
      () => recordedCalls(t.runtime.store, o.accountId),
      (r: UsageRecord[]) => r.length >= count,
    )
  ).map((r) => [r.method, r.status, r.rpcErrorCode, r.charged]);

/** The token's quota used this month, as the account view has it, once it reached `atLeast`. */
const monthUsage = async (o: Caller, atLeast: number): Promise<number> =>
  eventually(
    async () => (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth })).json().current_month_usage as number,
    (n) => n >= atLeast,
  );

const refused = (method: string) => ({ code: -32601, message: `Method not found: ${method} is not available on sol` });

describe('a method outside the list (a typo)', () => {
  it('a JSON-RPC POST, a batch member and the REST GET form: refused at the edge, no node call, metered uncharged', async () => {
    const o = await fresh();
    const alice = pubkey('alice').toBase58();
    node.changeAccount(alice, { lamports: 5_000 });
    const sentBefore = node.httpMethods.length;

    const single = await post(`${base}/sol/${o.token}`, { jsonrpc: '2.0', id: 7, method: 'getBalanse', params: [alice] });
    expect(single.status).toBe(403);
    expect(await single.json()).toEqual({ jsonrpc: '2.0', error: refused('getBalanse'), id: 7 });

    const rest = await fetch(`${base}/sol/${o.token}/getBalanse/${alice}`);
    expect(rest.status).toBe(404);
    expect(await rest.json()).toEqual({ error: { code: 'method_not_found', message: refused('getBalanse').message } });

    const batch = await post(`${base}/sol/${o.token}`, [
      { jsonrpc: '2.0', id: 'a', method: 'getBlockHeight', params: [] },
      { jsonrpc: '2.0', id: 'b', method: 'getBalanse', params: [alice] },
      { jsonrpc: '2.0', id: 'c', method: 'getBalance', params: [alice] },
    ]);
    expect(batch.status).toBe(200);
    expect(await batch.json()).toEqual([
      { jsonrpc: '2.0', result: expect.any(Number), id: 'a' },
      { jsonrpc: '2.0', error: refused('getBalanse'), id: 'b' },
      { jsonrpc: '2.0', result: { context: expect.any(Object), value: 5_000 }, id: 'c' },
    ]);

    // The node saw the batch's two good members and nothing else.
    expect([...node.httpMethods.slice(sentBefore)].sort()).toEqual(['getBalance', 'getBlockHeight']);
    expect(await records(o, 5)).toEqual([
      ['getBalanse', 403, -32601, false],
      ['getBalanse', 404, null, false],
      ['getBlockHeight', 200, null, true],
      ['getBalanse', 200, -32601, false],
      ['getBalance', 200, null, true],
    ]);
    expect(await monthUsage(o, 2)).toBe(2);
  });

  it('a subscription POSTed over HTTP: answered by the gateway with where to subscribe, sent to no node, uncharged', async () => {
    const o = await fresh();
    const sentBefore = node.httpMethods.length;
    const subscribe = await post(`${base}/sol/${o.token}`, { jsonrpc: '2.0', id: 1, method: 'accountSubscribe', params: [pubkey('alice').toBase58()] });
    expect(subscribe.status).toBe(200);
    const { error } = (await subscribe.json()) as { error: { code: number; message: string } };
    expect(error.code).toBe(-32601);
    expect(error.message).toMatch(/^notifications not supported over HTTP: accountSubscribe needs a WebSocket.*wss:\/\/<host>\/sol\/<token>/);
    const unsubscribe = await post(`${base}/sol/${o.token}`, { jsonrpc: '2.0', id: 2, method: 'accountUnsubscribe', params: [0] });
    expect(((await unsubscribe.json()) as { error: { code: number } }).error.code).toBe(-32601);
    expect(node.httpMethods.slice(sentBefore)).toEqual([]);
    expect((await records(o, 2)).map(([method, , code, charged]) => [method, code, charged])).toEqual([
      ['accountSubscribe', -32601, false],
      ['accountUnsubscribe', -32601, false],
    ]);
  });

  it('a WebSocket frame: the same refusal, sent to no node; a subscription on the same socket still opens', async () => {
    const o = await fresh();
    const client = await WsClient.open(`${wsBase}/sol/${o.token}`);
    try {
      const socketCallsBefore = node.socketCalls.length;
      expect((await client.call('getBalanse', [pubkey('alice').toBase58()])).error).toEqual(refused('getBalanse'));
      expect(node.socketCalls.slice(socketCallsBefore).map((c) => c.method)).not.toContain('getBalanse');
      expect(node.httpMethods).not.toContain('getBalanse');
      expect((await client.call('slotSubscribe')).result).toEqual(expect.any(Number));
    } finally {
      client.close();
    }
    expect((await records(o, 2)).map(([method, , code, charged]) => [method, code, charged])).toEqual([
      ['getBalanse', -32601, false],
      ['slotSubscribe', null, true],
    ]);
  });
});

describe('what @solana/web3.js sends', () => {
  it("Connection's calls over HTTP and its account subscription over the WebSocket go through, each charged; so does the REST form", async () => {
    const o = await fresh();
    const connection = new Connection(`${base}/sol/${o.token}`, { wsEndpoint: `${wsBase}/sol/${o.token}`, commitment: 'confirmed' });
    const bob = pubkey('bob');
    const { slot } = node.nextSlot();
    node.changeAccount(bob.toBase58(), { lamports: 77 });

    expect(await connection.getSlot()).toBe(slot);
    expect(await connection.getBalance(bob)).toBe(77);
    expect(await connection.getLatestBlockhash()).toEqual({ blockhash: blockhashOf(slot), lastValidBlockHeight: slot + 150 });
    expect(await connection.getBlockHeight()).toBe(slot);
    expect((await connection.getVersion())['solana-core']).toEqual(expect.any(String));
    const rest = await fetch(`${base}/sol/${o.token}/getBlockHeight`);
    expect(await rest.json()).toEqual({ result: { blockHeight: slot } });

    const changes: AccountInfo<Buffer>[] = [];
    const listener = connection.onAccountChange(bob, (info) => changes.push(info));
    await until(() => node.activeSubscriptions === 1);
    node.changeAccount(bob.toBase58(), { lamports: 78 });
    await until(() => changes.length === 1);
    expect(changes[0]?.lamports).toBe(78);
    await connection.removeAccountChangeListener(listener);
    await until(() => node.activeSubscriptions === 0);

    const calls = await records(o, 9);
    expect(calls.filter(([, , code]) => code !== null)).toEqual([]);
    expect(calls.map(([method]) => method).sort()).toEqual(
      [
        'getSlot',
        'getBalance',
        'getLatestBlockhash',
        'getBlockHeight',
        'getVersion',
        'getBlockHeight',
        'accountSubscribe',
        'accountNotification',
        'accountUnsubscribe',
      ].sort(),
    );
    // The unsubscribe is free; every other call used quota.
    expect(await monthUsage(o, 8)).toBe(8);
  });
});
