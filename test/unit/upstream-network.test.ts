import { describe, expect, it } from 'vitest';
import { keepableResult } from '../../src/gateway/cache/rpcReads.js';
import type { HeadTracking } from '../../src/gateway/chains.js';
import { callShapeOf } from '../../src/gateway/upstreams/callShape.js';
import { ChainHeads, networkOf } from '../../src/gateway/upstreams/heads.js';

/**
 * Which network each node is on (EVM `eth_chainId`, Solana `getGenesisHash`), asked by head
 * tracking: a node on another network than the chain's gets no call. The chain's network is the
 * configured one, else the one more than half of its nodes say.
 */

const EVM: HeadTracking = { family: 'evm', finality: 'finalized', maxLagBlocks: 5, fullNodeHistoryBlocks: 128, pollMs: 1_000 };
const HEAD = 5_000;
const answer = (result: unknown): Buffer => Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
const block = (n: number) => ({ number: `0x${n.toString(16)}`, hash: `0xh${n}` });

/**
 * A node: the chain id it says (a hex string; null: it has no eth_chainId, -32601; or another error
 * it answers, at 200), its head (HEAD unless given), and whether it answers at all.
 */
interface Node {
  chainId: string | null | { code: number; message: string };
  head?: number;
  down?: boolean;
}
const RATE_LIMITED = { code: -32005, message: 'rate limit exceeded' };

/** EVM nodes at the same head, each saying its chain id, on a clock the test moves. */
function evmNodes(nodes: Node[], network?: string) {
  let now = 1_000_000;
  const warnings: string[] = [];
  const asked: number[] = [];
  const probe = async (index: number, body: string): Promise<Buffer | null> => {
    const node = nodes[index] as Node;
    if (node.down) return null;
    const method = (JSON.parse(body) as { method: string }).method;
    if (method === 'eth_chainId') {
      asked.push(index);
      if (typeof node.chainId === 'string') return answer(node.chainId);
      const error = node.chainId ?? { code: -32601, message: 'the method eth_chainId does not exist' };
      return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, error }));
    }
    if (method === 'eth_syncing') return answer(false);
    if (body.startsWith('[')) return null; // EVM polls are single calls
    const head = node.head ?? HEAD;
    return answer(block(body.includes('"finalized"') ? head - 64 : head));
  };
  const h = new ChainHeads(
    { ...EVM, ...(network === undefined ? {} : { network }) },
    nodes.map((_, i) => `n${i}`),
    probe,
    () => now,
    null,
    (message) => warnings.push(message),
  );
  h.touch();
  return {
    h,
    asked,
    warnings,
    statuses: () => h.upstreams.map((u) => u.status),
    poll: async () => {
      h.touch();
      await h.poll();
    },
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe('networkOf', () => {
  it('reads an EVM chain id in decimal and a Solana genesis hash as given; nothing else names a network', () => {
    expect(networkOf('evm', '0x1')).toBe('1');
    expect(networkOf('evm', '0x0539')).toBe('1337');
    expect(networkOf('evm', `0x${'f'.repeat(40)}`)).toBe(BigInt(`0x${'f'.repeat(40)}`).toString());
    for (const odd of ['1', '0x', '0xg1', 1, null, { chainId: 1 }, `0x${'1'.repeat(65)}`]) expect(networkOf('evm', odd)).toBeNull();
    expect(networkOf('solana', '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d')).toBe('5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d');
    for (const odd of ['0OIl', '', 'short', 42]) expect(networkOf('solana', odd)).toBeNull();
  });
});

describe("a node on another network than the chain's", () => {
  it('gets no call when the config names the network, counts for no head, and is named once in a warning; back on it, it serves again', async () => {
    const nodes: Node[] = [{ chainId: '0x1' }, { chainId: '0x38' }];
    const { h, statuses, warnings, poll } = evmNodes(nodes, '1');
    await poll();
    expect(statuses()).toEqual(['ok', 'wrong_network']);
    // What it may have answered before is no longer served from the cache (kept by generation).
    const generation = h.generation;
    expect(generation).toBeGreaterThan(0);
    expect([h.takesNoCall(0), h.takesNoCall(1)]).toEqual([false, true]);
    expect(h.servesHead(1)).toBe(false);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/node n1 is on network 56, not the chain's 1 \(chainId in its config\): it gets no call until it says 1/);
    await poll();
    expect([warnings.length, h.generation]).toEqual([1, generation]);
    // Its URL serves the chain's network again: at the next poll (a node off the network is asked at each).
    nodes[1] = { chainId: '0x01' };
    await poll();
    expect(statuses()).toEqual(['ok', 'ok']);
    expect(warnings[1]).toMatch(/node n1 is on the chain's network \(1\) again/);
  });

  it('with no network configured, the one most nodes say is the chain’s: the other node gets no call', async () => {
    const { statuses, warnings, poll, h } = evmNodes([{ chainId: '0x1' }, { chainId: '0x89' }, { chainId: '0x1' }]);
    await poll();
    expect(statuses()).toEqual(['ok', 'wrong_network', 'ok']);
    expect(h.network).toBe('1');
    expect(warnings).toEqual([expect.stringMatching(/node n1 is on network 137, not the chain's 1 \(what most of its nodes say\)/)]);
  });

  it('two nodes that disagree with no network configured: neither is judged, and one warning says to set it', async () => {
    const { statuses, warnings, poll, h } = evmNodes([{ chainId: '0x1' }, { chainId: '0x38' }]);
    await poll();
    await poll();
    expect(statuses()).toEqual(['ok', 'ok']);
    expect(h.network).toBeNull();
    expect(warnings).toEqual([expect.stringMatching(/nodes disagree on the network: n0 says 1, n1 says 56; set the chain's network in its config/)]);
  });

  it('learns the network once more than half of all nodes said it: a node that answers later on another is caught, one never answering is not judged', async () => {
    const nodes: Node[] = [{ chainId: '0x1' }, { chainId: '0x1', down: true }, { chainId: null }];
    const { statuses, poll, h, advance } = evmNodes(nodes);
    await poll();
    // One of three said it: not yet the chain's.
    expect(h.network).toBeNull();
    nodes[1] = { chainId: '0x1' };
    advance(1_000);
    await poll();
    expect(h.network).toBe('1');
    expect(statuses()).toEqual(['ok', 'ok', 'ok']);
    // Two that agreed at first, then one's URL moved to another network (asked again within 10 minutes).
    nodes[0] = { chainId: '0xaa36a7' };
    advance(10 * 60_000);
    await poll();
    expect(statuses()).toEqual(['wrong_network', 'ok', 'ok']);
  });

  it('asks a node at its first poll, again after it failed one, and every 10 minutes; one answering with an error is asked no more often', async () => {
    const nodes: Node[] = [{ chainId: '0x1' }, { chainId: null }];
    const { asked, poll, advance } = evmNodes(nodes, '1');
    await poll();
    expect(asked).toEqual([0, 1]);
    advance(1_000);
    await poll();
    expect(asked).toEqual([0, 1]);
    nodes[0] = { chainId: '0x1', down: true };
    advance(1_000);
    await poll();
    nodes[0] = { chainId: '0x1' };
    advance(1_000);
    await poll();
    expect(asked).toEqual([0, 1, 0]);
    advance(10 * 60_000);
    await poll();
    expect(asked).toEqual([0, 1, 0, 0, 1]);
  });

  it('asks a node again at the next poll when it answered with another error (a rate limit): a Sepolia node beside a mainnet one is caught then', async () => {
    const nodes: Node[] = [
      { chainId: '0x1', head: 21_000_000 },
      { chainId: RATE_LIMITED, head: 7_000_000 },
    ];
    const { statuses, poll, advance, asked } = evmNodes(nodes, '1');
    await poll();
    nodes[1] = { chainId: '0xaa36a7', head: 7_000_000 };
    advance(1_000);
    await poll();
    // Before: not asked for 10 minutes, and the mainnet node, 14M blocks ahead of one not syncing, was the liar meanwhile.
    expect(asked).toEqual([0, 1, 1]);
    expect(statuses()).toEqual(['ok', 'wrong_network']);
  });

  it('does not measure nodes that said different networks against each other: two that disagree both serve', async () => {
    const { statuses, poll, warnings } = evmNodes([
      { chainId: '0x1', head: 21_000_000 },
      { chainId: '0xaa36a7', head: 7_000_000 },
    ]);
    await poll();
    await poll();
    expect(warnings).toEqual([expect.stringMatching(/nodes disagree on the network/)]);
    // Before: the one ahead was the liar for good (14M blocks past one not syncing), and every call went to the other.
    expect(statuses().map((s) => s === 'ok' || s === 'lagging')).toEqual([true, true]);
  });

  it('drops what a node answered while it said another network, once it says the chain’s (the network learned then)', async () => {
    const nodes: Node[] = [{ chainId: '0x1' }, { chainId: '0x38' }];
    const { h, statuses, poll, advance } = evmNodes(nodes);
    await poll();
    expect(statuses()).toEqual(['ok', 'ok']);
    const generation = h.generation;
    nodes[1] = { chainId: '0x1' };
    advance(10 * 60_000);
    await poll();
    expect(h.network).toBe('1');
    expect(h.generation).toBeGreaterThan(generation);
  });

  it('keeps no answer of a node until it said the chain’s network: one asked before its first poll, or on another, is served but not cached', async () => {
    const nodes: Node[] = [{ chainId: '0x539' }, { chainId: '0x1' }];
    const { h, poll } = evmNodes(nodes, '1337');
    const chainId = callShapeOf(h, 'eth_chainId', '[]');
    const keptFrom = (label: string, result: string) => keepableResult(answer(result), 'eth_chainId', chainId, h, h.epoch, label);
    // Before any poll: no node said its network yet.
    expect([keptFrom('n0', '0x539'), keptFrom('n1', '0x1')]).toEqual([null, null]);
    await poll();
    expect([keptFrom('n0', '0x539'), keptFrom('n1', '0x1')]).toEqual(['"0x539"', null]);
  });

  it('with no network configured or learned yet, keeps what a node answers while no other node said another network', async () => {
    const chainIdOf = (h: ChainHeads) => (label: string) =>
      keepableResult(answer('0x1'), 'eth_chainId', callShapeOf(h, 'eth_chainId', '[]'), h, h.epoch, label);
    // Its partner has no eth_chainId, or is down: no majority, and nothing against the one that said.
    for (const partner of [{ chainId: null }, { chainId: '0x1', down: true }]) {
      const { h, poll } = evmNodes([{ chainId: '0x1' }, partner]);
      await poll();
      expect(h.network).toBeNull();
      expect([chainIdOf(h)('n0'), chainIdOf(h)('n1')]).toEqual(['"0x1"', null]);
    }
    // Two that disagree: neither is kept from.
    const { h, poll } = evmNodes([{ chainId: '0x1' }, { chainId: '0x38' }]);
    await poll();
    expect([chainIdOf(h)('n0'), chainIdOf(h)('n1')]).toEqual([null, null]);
  });

  it('reads a Solana node’s cluster by its genesis hash', async () => {
    const MAINNET = '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d';
    const DEVNET = 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG';
    const genesis = [MAINNET, DEVNET];
    const probe = async (index: number, body: string): Promise<Buffer | null> => {
      if (body.includes('getGenesisHash')) return answer(genesis[index]);
      if (body.startsWith('[')) return Buffer.from(JSON.stringify([1, 2, 3].map((id) => ({ jsonrpc: '2.0', id, result: 300 - id }))));
      return answer(299);
    };
    const h = new ChainHeads(
      { ...EVM, family: 'solana', maxLagBlocks: 50, network: MAINNET },
      ['a', 'b'],
      probe,
      () => 1,
      null,
      () => {},
    );
    h.touch();
    await h.poll();
    expect(h.upstreams.map((u) => u.status)).toEqual(['ok', 'wrong_network']);
  });
});
