import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Web3 } from 'web3';
import type { UsageRecord } from '../../src/domain/usage.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * The EVM audit's follow-ups (docs/decisions.md, "Follow-ups of the EVM audit"): a filter id is
 * the token's that made it (another caller's poll, uninstall or guess of the node's number
 * reaches no node), across a restart; `"params": null` is no params; a refused notification
 * gets its error alone and nothing in a batch; eth_subscribe over HTTP is answered by the
 * gateway, uncharged, with where its WebSocket is. Real gateway, tokens and metering; two
 * ganache nodes behind one chain, and a recording node for what is forwarded.
 */

let a: GanacheNode;
let b: GanacheNode;
let recorder: FakeUpstream;
let t: TestApp;
let url: string;
let dataDir: string;
let configDir: string;
let env: Record<string, string>;
type Owner = Awaited<ReturnType<typeof newToken>>;
/** Three callers: three owners' tokens. */
let alice: Owner;
let bob: Owner;
let carol: Owner;

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };
let nextId = 1;
const call = (method: string, params: unknown = []) => ({ jsonrpc: '2.0', id: nextId++, method, params });

async function post(chain: string, who: Owner, body: unknown): Promise<{ status: number; headers: Headers; text: string; json: unknown }> {
  const r = await fetch(`${url}/${chain}/${who.token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text, json: text === '' ? null : (JSON.parse(text) as unknown) };
}

const rpc = async (chain: string, who: Owner, method: string, params: unknown = []): Promise<RpcAnswer> =>
  (await post(chain, who, call(method, params))).json as RpcAnswer;

async function direct(node: GanacheNode, method: string, params: unknown[] = []): Promise<unknown> {
  const r = await fetch(node.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(call(method, params)) });
  return ((await r.json()) as RpcAnswer).result;
}

const headHash = async (node: GanacheNode): Promise<string> => ((await direct(node, 'eth_getBlockByNumber', ['latest', false])) as { hash: string }).hash;

/** The owner's recorded calls of `method`, once `count` of them are in the usage log. */
const recorded = (who: Owner, method: string, count: number): Promise<UsageRecord[]> =>
  eventually(
    async () => (await recordedCalls(t.runtime.store, who.accountId)).filter((r) => r.method === method),
    (calls) => calls.length >= count,
    15_000,
  );

async function start(): Promise<void> {
  t = await startTestApp({ dataDir, env });
  ({ url } = await listen(t));
}

beforeAll(async () => {
  [a, b, recorder] = await Promise.all([startGanache(), startGanache(), startEvmFake()]);
  configDir = mkdtempSync(join(tmpdir(), 'gw-followups-'));
  dataDir = mkdtempSync(join(tmpdir(), 'gw-followups-data-'));
  const chainsFile = join(configDir, 'chains.json');
  const ws = a.url.replace(/^http/, 'ws');
  writeFileSync(
    chainsFile,
    JSON.stringify({
      chains: [
        {
          id: 'two',
          name: 'two',
          protocol: 'jsonrpc',
          timeoutMs: 5_000,
          headPollMs: 200,
          upstreams: [
            { url: a.url, label: 'two-a', ws },
            { url: b.url, label: 'two-b' },
          ],
        },
        { id: 'nows', name: 'nows', protocol: 'jsonrpc', timeoutMs: 5_000, upstreams: [{ url: a.url, label: 'nows-a' }] },
        { id: 'strict', name: 'strict', protocol: 'jsonrpc', timeoutMs: 5_000, allowedMethods: ['eth_*'], upstreams: [{ url: a.url, label: 'strict-a' }] },
        // A label whose tag in the first design began with 0 (sha256("web3-7") = 0cac…).
        { id: 'web', name: 'web', protocol: 'jsonrpc', timeoutMs: 5_000, upstreams: [{ url: a.url, label: 'web3-7' }] },
        { id: 'rec', name: 'rec', protocol: 'jsonrpc', timeoutMs: 5_000, finality: 'none', upstreams: [{ url: recorder.url, label: 'rec-1' }] },
      ],
    }),
  );
  env = { CHAINS_CONFIG: chainsFile };
  await start();
  // Carol's plan has a monthly quota, whose header shows what a call used.
  [alice, bob, carol] = await Promise.all([newToken(t, { plan: 'unlimited' }), newToken(t, { plan: 'unlimited' }), newToken(t, { plan: 'professional' })]);
});

afterAll(async () => {
  await t?.close();
  await Promise.all([a?.close(), b?.close(), recorder?.close()]);
  rmSync(configDir, { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
});

/** The node's own id in a filter id the gateway gave: what follows `0x` and the 8 hex digits of the tag. */
const nodeDigits = (id: string): string => id.slice(10);
const FILTER_NOT_FOUND = { code: -32000, message: 'filter not found' };

describe('a filter id is the token’s that made it', () => {
  it('another caller’s poll, uninstall or guess of the node’s number gets "filter not found" and reaches no node; the owner’s filter keeps its changes', async () => {
    const ours = (await rpc('two', alice, 'eth_newBlockFilter')).result as string;
    const [made] = await recorded(alice, 'eth_newBlockFilter', 1);
    const holder = made?.upstream === 'two-a' ? a : b;
    const digits = nodeDigits(ours);
    // ganache numbers filters 0x1, 0x2…: the node takes its number as `1` and as `"0x01"` too.
    const guesses: unknown[] = [ours, `0x${digits}`, Number.parseInt(digits, 16), `0x0${digits}`, `0x${'0'.repeat(8)}${digits}`];
    const answers: unknown[] = [];
    for (const guess of guesses) {
      for (const method of ['eth_getFilterChanges', 'eth_getFilterLogs', 'eth_uninstallFilter']) {
        const r = await post('two', bob, { jsonrpc: '2.0', id: 'x', method, params: [guess] });
        answers.push([r.status, r.json]);
      }
    }
    expect(answers).toEqual(Array(guesses.length * 3).fill([200, { jsonrpc: '2.0', id: 'x', error: FILTER_NOT_FOUND }]));
    // In a batch too, beside a call that is served.
    const batch = await post('two', bob, [call('eth_uninstallFilter', [ours]), { jsonrpc: '2.0', id: 'c', method: 'eth_chainId', params: [] }]);
    expect(batch.json).toEqual([
      { jsonrpc: '2.0', id: nextId - 1, error: FILTER_NOT_FOUND },
      { jsonrpc: '2.0', id: 'c', result: '0x539' },
    ]);
    // No id named at all is the node's to answer (what is missing), as before.
    expect((await rpc('two', bob, 'eth_getFilterChanges', [])).error?.message).toMatch(/argument/);

    // The owner's filter is whole: it hands over the block mined since.
    await direct(holder, 'evm_mine');
    expect(await rpc('two', alice, 'eth_getFilterChanges', [ours])).toMatchObject({ result: [await headHash(holder)] });
    expect(await rpc('two', alice, 'eth_uninstallFilter', [ours])).toMatchObject({ result: true });

    // Metered as the node's answer would be (charged), with no node.
    const refused = [
      ...(await recorded(bob, 'eth_getFilterChanges', guesses.length + 1)),
      ...(await recorded(bob, 'eth_getFilterLogs', guesses.length)),
      ...(await recorded(bob, 'eth_uninstallFilter', guesses.length + 1)),
    ].filter((r) => r.rpcErrorCode === FILTER_NOT_FOUND.code);
    expect(refused).toHaveLength(3 * guesses.length + 1);
    expect(refused.every((r) => r.upstream === null && r.charged === true && r.errorMessage === 'filter not found')).toBe(true);
  });

  it('each caller polls only its own filters, on either node; a filter made before a restart is polled after it, and is still no one else’s', async () => {
    const made: Array<[Owner, string]> = [];
    for (let i = 0; i < 4; i++) for (const who of [alice, bob]) made.push([who, (await rpc('two', who, 'eth_newBlockFilter')).result as string]);
    // Ids are distinct whoever asked, though each node numbers its own filters 0x1, 0x2…
    expect(new Set(made.map(([, id]) => id)).size).toBe(made.length);

    await t.close({ keepData: true });
    await start();
    await Promise.all([direct(a, 'evm_mine'), direct(b, 'evm_mine')]);
    const heads = new Set([await headHash(a), await headHash(b)]);
    for (const [who, id] of made) {
      const other = who === alice ? bob : alice;
      expect(await rpc('two', other, 'eth_getFilterChanges', [id])).toMatchObject({ error: FILTER_NOT_FOUND });
      const changes = (await rpc('two', who, 'eth_getFilterChanges', [id])).result as string[];
      expect(changes).toHaveLength(1);
      expect(heads.has(changes[0] as string)).toBe(true);
    }
  });
});

describe('filter ids as web3.js reads them', () => {
  it('survive web3.js v4, which reads a filter id as a number and sends it back without leading zeros: no tag starts with 0', async () => {
    const web3 = new Web3(`${url}/web/${alice.token}`);
    const ids: bigint[] = [];
    for (let i = 0; i < 32; i++) ids.push(await web3.eth.createNewBlockFilter());
    await direct(a, 'evm_mine');
    const head = await headHash(a);
    const polled: unknown[] = [];
    for (const id of ids) polled.push(await web3.eth.getFilterChanges(id).catch((err: Error) => err.message));
    expect(polled).toEqual(Array(ids.length).fill([head]));
    for (const id of ids) expect(await web3.eth.uninstallFilter(id)).toBe(true);
  });
});

describe('"params": null is no params', () => {
  it('is served alone and in a batch, forwarded as []', async () => {
    recorder.reset();
    const single = await post('rec', alice, '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":null}');
    expect([single.status, single.json]).toEqual([200, { jsonrpc: '2.0', id: 1, result: '0x539' }]);
    const batch = await post(
      'rec',
      alice,
      '[{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber","params":null},{"jsonrpc":"2.0","method":"eth_chainId","params":null}]',
    );
    expect([batch.status, batch.json]).toEqual([200, [{ jsonrpc: '2.0', id: 2, result: '0x10' }]]);
    expect(recorder.calls.map((c) => c.body)).toEqual([
      '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}',
      '[{"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]},{"jsonrpc":"2.0","method":"eth_chainId","params":[]}]',
    ]);
    // A real node answers it as geth does.
    expect(await post('two', alice, '{"jsonrpc":"2.0","id":3,"method":"eth_chainId","params":null}')).toMatchObject({
      status: 200,
      json: { jsonrpc: '2.0', id: 3, result: '0x539' },
    });
    // Params of another type are still the gateway's 400.
    expect(await post('rec', alice, '{"jsonrpc":"2.0","id":4,"method":"eth_chainId","params":5}')).toMatchObject({
      status: 400,
      json: { error: { code: -32602 } },
    });
  });
});

describe('a refused notification: its error alone, nothing in a batch', () => {
  it('a denied or unlisted method sent as a notification gets the status and error of a call with id null alone, and no element in a batch; each is metered, uncharged', async () => {
    const denied = await post('two', bob, { jsonrpc: '2.0', method: 'admin_peers', params: [] });
    expect([denied.status, denied.json]).toEqual([
      403,
      { jsonrpc: '2.0', id: null, error: { code: -32601, message: 'Method not found: admin_peers is not available on two' } },
    ]);
    const unlisted = await post('strict', bob, { jsonrpc: '2.0', method: 'foo_bar', params: [] });
    expect([unlisted.status, (unlisted.json as RpcAnswer).id, (unlisted.json as RpcAnswer).error?.code]).toEqual([403, null, -32601]);
    // A served notification: nothing, as JSON-RPC has it.
    expect(await post('two', bob, { jsonrpc: '2.0', method: 'eth_chainId', params: [] })).toMatchObject({ status: 204, text: '' });
    const mixed = await post('two', bob, [
      { jsonrpc: '2.0', method: 'admin_peers', params: [] },
      { jsonrpc: '2.0', id: 'm', method: 'eth_chainId', params: [] },
    ]);
    expect([mixed.status, mixed.json]).toEqual([200, [{ jsonrpc: '2.0', id: 'm', result: '0x539' }]]);
    const allRefused = await post('two', bob, [
      { jsonrpc: '2.0', method: 'admin_peers', params: [] },
      { jsonrpc: '2.0', method: 'debug_traceTransaction', params: [] },
    ]);
    expect([allRefused.status, allRefused.text]).toEqual([204, '']);
    const records = (await recorded(bob, 'admin_peers', 3)).concat(await recorded(bob, 'debug_traceTransaction', 1), await recorded(bob, 'foo_bar', 1));
    expect(records.map((r) => [r.rpcErrorCode, r.charged, r.upstream])).toEqual(Array(5).fill([-32601, false, null]));
  });
});

describe('eth_subscribe and eth_unsubscribe over HTTP', () => {
  it('are answered by the gateway, uncharged, with the WebSocket URL of the chain, which serves them', async () => {
    const first = await post('two', carol, call('eth_subscribe', ['newHeads']));
    expect(first.status).toBe(200);
    const error = (first.json as RpcAnswer).error;
    expect(error?.code).toBe(-32601);
    expect(error?.message).toMatch(/^notifications not supported over HTTP: eth_subscribe needs a WebSocket/);
    expect(error?.message).toContain('wss://<host>/two/<token>');
    const unsubscribe = await post('two', carol, call('eth_unsubscribe', ['0x1']));
    expect([unsubscribe.status, (unsubscribe.json as RpcAnswer).error?.code]).toEqual([200, -32601]);
    // No quota used: the monthly count is where it was.
    expect(first.headers.get('x-monthlylimit-remaining')).toMatch(/^\d+$/);
    expect(unsubscribe.headers.get('x-monthlylimit-remaining')).toBe(first.headers.get('x-monthlylimit-remaining'));
    // In a batch: its own error, the batch's other calls served; as a notification alone, its error.
    const batch = await post('two', carol, [call('eth_subscribe', ['newHeads']), { jsonrpc: '2.0', id: 'c', method: 'eth_chainId', params: [] }]);
    expect([batch.status, (batch.json as RpcAnswer[]).map((m) => m.result ?? m.error?.code)]).toEqual([200, [-32601, '0x539']]);
    const notification = await post('two', carol, { jsonrpc: '2.0', method: 'eth_subscribe', params: ['newHeads'] });
    expect([notification.status, (notification.json as RpcAnswer).id, (notification.json as RpcAnswer).error?.code]).toEqual([200, null, -32601]);
    // A chain whose nodes have no WebSocket says so.
    expect((await rpc('nows', carol, 'eth_subscribe', ['newHeads'])).error?.message).toMatch(/^notifications not supported: nows offers no subscriptions/);

    // Where it says: the same URL as a WebSocket.
    const socket = await WsClient.open(`${url.replace(/^http/, 'ws')}/two/${carol.token}`);
    try {
      const subscribed = await socket.call('eth_subscribe', ['newHeads']);
      expect(subscribed.result).toMatch(/^0x[0-9a-f]{32}$/);
    } finally {
      socket.close();
    }

    const records = (await recorded(carol, 'eth_subscribe', 5)).filter((r) => r.rpcErrorCode !== null);
    expect(records.map((r) => [r.rpcErrorCode, r.charged, r.upstream])).toEqual(Array(4).fill([-32601, false, null]));
    expect((await recorded(carol, 'eth_unsubscribe', 1)).map((r) => [r.rpcErrorCode, r.charged, r.upstream])).toEqual([[-32601, false, null]]);
  });
});
