/**
 * Solana's nodes are followed by slot, as EVM nodes are by block (docs/decisions.md, "Solana
 * nodes are followed by slot"): each node's `processed` and `finalized` slots are polled while the
 * chain has traffic, and a node more than `maxLagBlocks` slots (50 by default) behind the best
 * gets no call, over REST or JSON-RPC, until it catches up. The whole service (startTestApp) in
 * front of three fake Solana nodes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../support/eventually.js';
import { startFakeSolanaWsUpstream } from '../support/fakeSolanaWsUpstream.js';
import { type FakeUpstream, SOLANA, startSolanaFake } from '../support/fakeUpstreams.js';
import { chainServiceConfig } from '../support/serviceOnEvmNodes.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

const PUBKEY = '83astBRguLMdt2h5U1Tpdq5tjFoJ6noeGwaY3mDLVcri';

const opened: Array<{ close(): Promise<void> }> = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** The service in front of these Solana upstreams (`url`, and `ws` where a node pushes its slots), its chain `sol`. */
async function serviceOn(upstreams: Array<{ url: string; ws?: string }>, chainExtra: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'gw-sol-nodes-'));
  dirs.push(dir);
  const config = chainServiceConfig(dir, {
    id: 'sol',
    name: 'Solana',
    protocol: 'rest',
    rest: 'solana',
    jsonRpcPost: true,
    timeoutMs: 1_000,
    headPollMs: 200,
    upstreams,
    ...chainExtra,
  });
  const t: TestApp = await startTestApp({ env: config });
  opened.push(t);
  const { url } = await listen(t);
  const { token } = await newToken(t, { plan: 'unlimited' });
  const heads = t.runtime.gateway!.pools.get('sol')!.heads!;
  return { t, base: `${url}/sol/${token}`, heads };
}

/** The service in front of Solana nodes at `slots()` (each node's own slot, read at every call). */
async function serviceOnSolanaNodes(slots: Array<() => number>, chainExtra: Record<string, unknown> = {}) {
  const nodes = await Promise.all(slots.map((slot) => startSolanaFake(slot)));
  opened.push(...nodes);
  return {
    ...(await serviceOn(
      nodes.map((n) => ({ url: n.url })),
      chainExtra,
    )),
    nodes,
  };
}

/** Three nodes at SOLANA's slot, the third `lag` slots behind (within the bound), once the gateway has polled them; the nodes' calls forgotten. */
async function serviceWithThirdNodeBehind(lag: number) {
  const slot = SOLANA.slot;
  const service = await serviceOnSolanaNodes([() => slot, () => slot, () => slot - lag]);
  await balances(service.base, 1);
  await until(() => service.heads.upstreams.every((u) => u.status === 'ok') && service.heads.upstreams[2]?.head === slot - lag, 10_000);
  for (const n of service.nodes) n.calls.length = 0;
  return { ...service, slot };
}

/** `count` getBalance calls (at `minContextSlot` when given), every other one over REST and over JSON-RPC, each answered 200 with the lamports. */
async function balances(base: string, count: number, minContextSlot?: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const r =
      i % 2 === 0
        ? await fetch(`${base}/getBalance/${PUBKEY}${minContextSlot === undefined ? '' : `?minContextSlot=${minContextSlot}`}`)
        : await fetch(base, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              jsonrpc: '2.0',
              id: i,
              method: 'getBalance',
              params: minContextSlot === undefined ? [PUBKEY] : [PUBKEY, { minContextSlot }],
            }),
          });
    expect(r.status).toBe(200);
    expect(JSON.stringify(await r.json())).toContain(String(SOLANA.lamports));
  }
}

const callsTo = (nodes: FakeUpstream[]): number[] => nodes.map((n) => n.calls.length);

describe('Solana nodes followed by slot', () => {
  it('sends no call to a node 500 slots behind the others, and calls it again once it is back within 50', async () => {
    const slot = SOLANA.slot;
    let lag = 500;
    const { base, nodes, heads } = await serviceOnSolanaNodes([() => slot, () => slot, () => slot - lag]);
    // The first call starts the polls.
    await balances(base, 1);
    await until(() => heads.upstreams.map((u) => u.status).join() === 'ok,ok,lagging', 10_000);
    expect([heads.best, heads.finalized]).toEqual([slot, SOLANA.finalizedSlot]);
    for (const n of nodes) n.calls.length = 0;
    await balances(base, 30);
    // Before: a third of the calls went to the node 500 slots (~3 min) behind, which answers with its old state.
    const [a, b, behind] = callsTo(nodes);
    expect([behind, (a as number) + (b as number)]).toEqual([0, 30]);
    lag = 10;
    await until(() => heads.upstreams.every((u) => u.status === 'ok'), 10_000);
    for (const n of nodes) n.calls.length = 0;
    await balances(base, 30);
    expect(callsTo(nodes).every((n) => n > 0)).toBe(true);
  });

  it('takes a node restarted from a snapshot 20,000 slots (~2 h) back for a lagging one, not the other for a liar', async () => {
    const slot = SOLANA.slot;
    const { base, nodes, heads } = await serviceOnSolanaNodes([() => slot, () => slot - 20_000]);
    await balances(base, 1);
    await until(() => heads.upstreams.every((u) => u.status !== 'unknown'), 10_000);
    // Before: 20,000 past the only other node was past the EVM lie bound (10,000): the node at the chain's slot
    // was called a liar and every call went to the one 2 hours behind.
    expect([heads.upstreams.map((u) => u.status), heads.best]).toEqual([['ok', 'lagging'], slot]);
    for (const n of nodes) n.calls.length = 0;
    await balances(base, 10);
    expect(callsTo(nodes)).toEqual([10, 0]);
  });

  it("sends no call to a node of another cluster than the chain's genesisHash names, over REST or JSON-RPC", async () => {
    const DEVNET = 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG';
    const nodes = await Promise.all([startSolanaFake(undefined, {}, DEVNET), startSolanaFake()]);
    opened.push(...nodes);
    const { base, heads } = await serviceOn(
      nodes.map((n) => ({ url: n.url })),
      { genesisHash: SOLANA.genesisHash },
    );
    await balances(base, 1);
    await until(() => heads.upstreams.every((u) => u.status !== 'unknown'), 10_000);
    // Before: a devnet RPC under `sol` took its share of the calls (devnet balances, devnet blocks).
    expect(heads.upstreams.map((u) => u.status)).toEqual(['wrong_network', 'ok']);
    for (const n of nodes) n.calls.length = 0;
    await balances(base, 10);
    expect(callsTo(nodes)).toEqual([0, 10]);
  });

  it('sends a call naming a minContextSlot to a node known to be past it', async () => {
    // Within the lag bound (50): no node is lagging, but the third has not reached the slot the calls name.
    const { base, nodes, slot } = await serviceWithThirdNodeBehind(20);
    // Before: a third of them went to the node behind, and its -32016 "Minimum context slot has not been reached" reached the caller.
    await balances(base, 20, slot - 5);
    expect(callsTo(nodes)[2]).toBe(0);
  });

  it("asks a node at the best slot when one answers that it has not reached the call's minContextSlot", async () => {
    const slot = SOLANA.slot;
    let ahead = 0;
    // Polled once (at the first call), then not for 10 minutes: the gateway takes the three nodes as level.
    const { base, nodes, heads } = await serviceOnSolanaNodes([() => slot + ahead, () => slot + ahead, () => slot], { headPollMs: 600_000 });
    await balances(base, 1);
    await until(() => heads.upstreams.every((u) => u.head === slot), 10_000);
    ahead = 100;
    for (const n of nodes) n.calls.length = 0;
    // Before: every call the third node took answered the caller -32016.
    await balances(base, 20, slot + 50);
    expect(callsTo(nodes)[2]).toBeGreaterThan(0);
    // In batches too: the member the node had not reached is asked again alone (its twin waiting for that answer).
    for (const n of nodes) n.calls.length = 0;
    for (let i = 0; i < 20; i++) {
      const atSlot = { jsonrpc: '2.0', method: 'getBalance', params: [PUBKEY, { minContextSlot: slot + 50 }] };
      const r = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify([
          { ...atSlot, id: 1 },
          { ...atSlot, id: 2 },
          { jsonrpc: '2.0', id: 3, method: 'getHealth', params: [] },
        ]),
      });
      const answers = (await r.json()) as Array<{ id: number; result?: unknown; error?: unknown }>;
      expect(answers.map((a) => [a.id, a.error === undefined])).toEqual([
        [1, true],
        [2, true],
        [3, true],
      ]);
    }
    expect(callsTo(nodes)[2]).toBeGreaterThan(0);
  });

  it('answers getSlot at processed, confirmed and finalized with no slot under the best the gateway knows, over REST and JSON-RPC', async () => {
    const { base, slot } = await serviceWithThirdNodeBehind(5);
    const got: Array<[string, number]> = [];
    for (let i = 0; i < 12; i++) {
      for (const commitment of ['processed', 'confirmed', 'finalized', undefined]) {
        const rest = await fetch(`${base}/getSlot${commitment === undefined ? '' : `?commitment=${commitment}`}`);
        got.push([`REST ${commitment}`, ((await rest.json()) as { result: { slot: number } }).result.slot]);
        const params = commitment === undefined ? [] : [{ commitment }];
        const rpc = await fetch(base, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'getSlot', params }),
        });
        got.push([`RPC ${commitment}`, ((await rpc.json()) as { result: number }).result]);
      }
    }
    // Before: the node 5 slots behind answered a third of them with its own, older slots. `finalized` is Agave's default.
    const expected = (label: string) => (label.endsWith('processed') ? slot : label.endsWith('confirmed') ? slot - 1 : SOLANA.finalizedSlot);
    expect(got.filter(([label, n]) => n !== expected(label))).toEqual([]);
  });

  it('answers getSlot in a batch with no slot under the best the gateway knows', async () => {
    const { base, slot } = await serviceWithThirdNodeBehind(5);
    const wrong: Array<[number, unknown]> = [];
    const expected = new Map<number, unknown>([
      [1, slot],
      [2, SOLANA.finalizedSlot],
      [3, SOLANA.lamports],
    ]);
    for (let i = 0; i < 12; i++) {
      const r = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify([
          { jsonrpc: '2.0', id: 1, method: 'getSlot', params: [{ commitment: 'processed' }] },
          { jsonrpc: '2.0', id: 2, method: 'getSlot', params: [] },
          { jsonrpc: '2.0', id: 3, method: 'getBalance', params: [PUBKEY] },
        ]),
      });
      const answers = (await r.json()) as Array<{ id: number; result: number | { value: number } }>;
      for (const { id, result } of answers) {
        const value = typeof result === 'number' ? result : result.value;
        if (value !== expected.get(id)) wrong.push([id, value]);
      }
      expect(answers).toHaveLength(3);
    }
    // A batch goes to one node: the one 5 slots behind took about a third of them, each getSlot lifted to the best slot known.
    expect(wrong).toEqual([]);
  });

  it("sends getBlock to a node whose slot has reached the block's", async () => {
    const { base, nodes, slot } = await serviceWithThirdNodeBehind(20);
    for (let i = 0; i < 20; i++) {
      const r = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'getBlock', params: [slot - 10, { maxSupportedTransactionVersion: 0 }] }),
      });
      // Before: a third went to the node 20 slots behind, which answered -32004 "Block not available for slot".
      expect(((await r.json()) as { result?: { blockhash: string } }).result?.blockhash).toBe(`block${slot - 10}`);
    }
    expect(callsTo(nodes)[2]).toBe(0);
  });

  it("follows a node's slots as it pushes them (slotSubscribe), between polls", async () => {
    const node = await startFakeSolanaWsUpstream();
    opened.push(node);
    // Polled once, at the first call, then not for 10 minutes.
    const { base, heads } = await serviceOn([{ url: node.httpUrl, ws: node.wsUrl }], { headPollMs: 600_000 });
    const slotOf = async () => ((await (await fetch(`${base}/getSlot?commitment=processed`)).json()) as { result: { slot: number } }).result.slot;
    const first = await slotOf();
    await until(() => heads.upstreams[0]?.status === 'ok', 10_000);
    // Before: the node's slots were only polled, and the head stayed where the first poll put it.
    let last = first;
    for (let i = 0; i < 5; i++) last = node.nextSlot().slot;
    await until(() => heads.best === last, 10_000);
    expect(heads.best).toBeGreaterThan(first);
    // Its own connection: none of the callers' subscriptions.
    expect([node.connectionsAccepted, node.activeSubscriptions]).toEqual([0, 0]);
  });

  it('serves a finalized block and a finalized transaction from the cache, and asks a node for anything newer each time', async () => {
    const slot = SOLANA.slot;
    const node = await startSolanaFake(() => slot, { finalTx: SOLANA.finalizedSlot - 10, newTx: slot - 2 });
    opened.push(node);
    const { base, heads } = await serviceOn([{ url: node.url }]);
    const call = async (method: string, params: unknown[]) => {
      const r = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method, params }),
      });
      return (await r.json()) as { id: number; result: unknown };
    };
    await call('getHealth', []);
    await until(() => heads.finalized === SOLANA.finalizedSlot, 10_000);
    const asked = (method: string) => node.calls.filter((c) => c.body.includes(`"${method}"`)).length;
    const config = { maxSupportedTransactionVersion: 0 };
    for (let i = 0; i < 3; i++) {
      expect((await call('getTransaction', ['finalTx', config])).result).toMatchObject({ slot: SOLANA.finalizedSlot - 10 });
      expect((await call('getTransaction', ['newTx', config])).result).toMatchObject({ slot: slot - 2 });
      expect((await call('getBlock', [SOLANA.finalizedSlot, config])).result).toMatchObject({ blockhash: `block${SOLANA.finalizedSlot}` });
      expect((await call('getBlock', [slot - 1, config])).result).toMatchObject({ blockhash: `block${slot - 1}` });
    }
    // Over REST too (its own params, so its own entries).
    for (let i = 0; i < 3; i++) {
      const tx = (await (await fetch(`${base}/getTransaction/finalTx`)).json()) as { result: unknown };
      expect(tx.result).toMatchObject({ slot: SOLANA.finalizedSlot - 10 });
      const block = (await (await fetch(`${base}/getBlock?params=[${SOLANA.finalizedSlot}]`)).json()) as { result: unknown };
      expect(block.result).toMatchObject({ blockhash: `block${SOLANA.finalizedSlot}` });
    }
    // Before: every call to the node (6 and 6).
    expect([asked('getTransaction'), asked('getBlock')]).toEqual([1 + 3 + 1, 1 + 3 + 1]);
  });

  it('polls no node while the chain has no traffic, and none with `finality: "none"`', async () => {
    const quiet = await serviceOnSolanaNodes([() => SOLANA.slot]);
    const untracked = await serviceOnSolanaNodes([() => SOLANA.slot], { finality: 'none' });
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(quiet.nodes[0]?.headPolls).toHaveLength(0);
    await balances(untracked.base, 3);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect([untracked.nodes[0]?.headPolls.length, untracked.t.runtime.gateway!.pools.get('sol')!.heads]).toEqual([0, null]);
  });
});
