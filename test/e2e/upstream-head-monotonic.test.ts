/**
 * The head a caller reads never goes back (docs/decisions.md, "The head never goes back within a
 * poll interval"), through the whole service (startTestApp, the nodes given as UPSTREAM_EVM) in
 * front of two fake nodes of one moving chain: a node's answer to a head call raises what the
 * gateway knows of its head, `eth_blockNumber` is never answered under the best head known,
 * and a `latest` block under it is asked again of a node at that head (the best head, as polls and answers show it).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';
import { eventually, until } from '../support/eventually.js';
import type { EvmNodeFake, ReceivedCall } from '../support/fakeUpstreams.js';
import { rpc, Started } from '../support/serviceOnEvmNodes.js';
import { recordedCalls } from '../support/usageLog.js';

const started = new Started();
afterEach(() => started.close());

/** A call's result; the call answered 200. */
async function resultOf(url: string, method: string, params: unknown[] = []): Promise<unknown> {
  const r = await rpc(url, method, params);
  expect(r.status).toBe(200);
  return r.body.result;
}

const blockNumber = async (url: string): Promise<number> => Number(await resultOf(url, 'eth_blockNumber'));
const latestBlock = async (url: string, full: boolean): Promise<number> =>
  Number(((await resultOf(url, 'eth_getBlockByNumber', ['latest', full])) as { number: string }).number);

describe('eth_blockNumber while one node is a block or two behind', () => {
  it('never decreases across calls between two polls (before: the node behind answered every other call)', async () => {
    // Polled once at the first call, then not for 10 minutes: every later head is seen only in answers.
    const { t, url, nodes, chain } = await started.serviceOnEvmNodes(2, { headPollMs: 600_000 });
    const [, behind] = nodes as [EvmNodeFake, EvmNodeFake];
    const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
    await resultOf(url, 'eth_chainId');
    await until(() => heads.upstreams.every((u) => u.head === chain.head));
    const polled = chain.head;
    // Both at the same head for the gateway; from now on one node is 1 or 2 blocks behind the other (within maxLagBlocks, 10).
    behind.behaviour = 'behind';
    const numbers: number[] = [];
    for (let round = 0; round < 6; round++) {
      chain.advance(2);
      behind.lagBlocks = 1 + (round % 2);
      for (let i = 0; i < 8; i++) numbers.push(await blockNumber(url));
    }
    const wentBack = numbers.flatMap((n, i) => (i > 0 && n < (numbers[i - 1] as number) ? [[numbers[i - 1], n]] : []));
    expect(wentBack).toEqual([]);
    // Every answer a head a node had, none the stale polled one (answers kept for a head live 2 × headPollMs).
    expect(Math.min(...numbers)).toBeGreaterThan(polled);
  });
});

/**
 * A provider's URL in front of several nodes: the gateway's head polls reach one at the head, its
 * callers' calls one a block behind (the fake reads the call before answering it).
 */
function pollsAtHeadCallsBehind(node: EvmNodeFake): void {
  node.lagBlocks = 1;
  node.latency = (call: ReceivedCall) => {
    node.behaviour = call.headers[HEAD_POLL_HEADER] === undefined ? 'behind' : 'honest';
    return 0;
  };
}

/** The service in front of two nodes, the second behind a provider URL (pollsAtHeadCallsBehind), its heads followed from a first call. */
async function serviceWithNodeBehind() {
  const setup = await started.serviceOnEvmNodes(2);
  pollsAtHeadCallsBehind(setup.nodes[1] as EvmNodeFake);
  const heads = setup.t.runtime.gateway!.pools.get('evm')!.heads!;
  await resultOf(setup.url, 'eth_chainId');
  return { ...setup, heads };
}

/** 8 rounds: the chain moves a block, the gateway's polls show what `seen` waits for, then `calls` are made. */
async function eachNewBlock(chain: { advance(): void }, seen: () => boolean, calls: () => Promise<void>): Promise<void> {
  for (let round = 0; round < 8; round++) {
    chain.advance();
    await until(seen);
    await calls();
  }
}

describe('a node whose answers are behind the head the gateway knows', () => {
  it('answers eth_blockNumber with the best head known and asks a node at it for the latest block', async () => {
    const { url, chain, heads } = await serviceWithNodeBehind();
    const got: Array<[string, number, number]> = [];
    await eachNewBlock(
      chain,
      () => heads.upstreams.every((u) => u.head === chain.head),
      async () => {
        for (let i = 0; i < 3; i++) got.push(['eth_blockNumber', await blockNumber(url), chain.head]);
        got.push(['latest', await latestBlock(url, false), chain.head]);
        got.push(['latest full', await latestBlock(url, true), chain.head]);
      },
    );
    // Before: the node behind's answers (one block under the head the gateway had just polled) about half the time.
    expect(got.filter(([, n, head]) => n !== head)).toEqual([]);
  });
});

/** A batch's results by id; the batch answered 200. */
async function batchResults(url: string, calls: Array<[string, unknown[]]>): Promise<unknown[]> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(calls.map(([method, params], id) => ({ jsonrpc: '2.0', id, method, params }))),
  });
  expect(r.status).toBe(200);
  const answers = (await r.json()) as Array<{ id: number; result?: unknown; error?: unknown }>;
  return calls.map((_, id) => {
    const answer = answers.find((a) => a.id === id);
    expect(answer?.error).toBeUndefined();
    return answer?.result;
  });
}

describe('head calls inside a batch', () => {
  it('answer eth_blockNumber with the best head known and the latest block from a node at it, as single calls do', async () => {
    const { t, url, chain, accountId, heads } = await serviceWithNodeBehind();
    const got: Array<[string, number, number]> = [];
    await eachNewBlock(
      chain,
      () => heads.upstreams.every((u) => u.head === chain.head),
      async () => {
        for (let i = 0; i < 3; i++) {
          // A batch as viem's and ethers' batching send it: head calls beside other reads, all in one upstream batch.
          const [number, block, fullBlock, chainId] = await batchResults(url, [
            ['eth_blockNumber', []],
            ['eth_getBlockByNumber', ['latest', false]],
            ['eth_getBlockByNumber', ['latest', true]],
            ['eth_chainId', []],
          ]);
          expect(chainId).toBe('0x2a');
          got.push(['eth_blockNumber', Number(number), chain.head]);
          got.push(['latest', Number((block as { number: string }).number), chain.head]);
          got.push(['latest full', Number((fullBlock as { number: string }).number), chain.head]);
        }
      },
    );
    // Before: every head call the node behind answered, one block under the head the gateway had just polled.
    expect(got.filter(([, n, head]) => n !== head)).toEqual([]);
    // A block asked again is still one call, recorded once: the first eth_chainId and 24 batches of 4.
    const recorded = await eventually(
      () => recordedCalls(t.runtime.store, accountId),
      (calls) => calls.length >= 97,
      20_000,
    );
    const byMethod = (calls: UsageRecord[]) =>
      Object.fromEntries([...new Set(calls.map((c) => c.method))].map((m) => [m, calls.filter((c) => c.method === m).length]));
    expect(byMethod(recorded)).toEqual({ eth_chainId: 25, eth_blockNumber: 24, eth_getBlockByNumber: 48 });
  });

  it("wait the chain's callTimeoutMs in all when a latest block is asked again and no node at the head answers: the block behind then, as a single call", async () => {
    const { t, url, nodes, chain } = await started.serviceOnEvmNodes(2, { timeoutMs: 2_500, callTimeoutMs: 3_000 });
    const [atHead, behind] = nodes as [EvmNodeFake, EvmNodeFake];
    behind.behaviour = 'behind';
    behind.lagBlocks = 1;
    const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
    await resultOf(url, 'eth_chainId');
    await until(() => heads.upstreams[0]?.head === chain.head && heads.upstreams[1]?.head === chain.head - 1);
    // The node at the head sends a broken answer to a batch, and takes 10 s over a single call; the node behind takes 2 s over a batch.
    atHead.rewrite = (body, call) => (call.body.startsWith('[') ? 'not json' : body);
    atHead.latency = (call) => (call.headers[HEAD_POLL_HEADER] === undefined && !call.body.startsWith('[') ? 10_000 : 0);
    behind.latency = (call) => (call.body.startsWith('[') ? 2_000 : 0);
    const sentAt = performance.now();
    const [block, chainId] = await batchResults(url, [
      ['eth_getBlockByNumber', ['latest', false]],
      ['eth_chainId', []],
    ]);
    const waited = performance.now() - sentAt;
    expect([Number((block as { number: string }).number), chainId]).toEqual([chain.head - 1, '0x2a']);
    // Before: the member asked again got a callTimeoutMs of its own after the batch's 2 s, about 5 s in all.
    expect(waited).toBeLessThan(4_000);
  });

  it("raise what the gateway knows of the answering node's head, as a single call's answer does", async () => {
    const { t, url, nodes, chain } = await started.serviceOnEvmNodes(2, { headPollMs: 600_000 });
    const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
    await resultOf(url, 'eth_chainId');
    await until(() => heads.upstreams.every((u) => u.head === chain.head));
    const polled = chain.head;
    chain.advance(3);
    const sent = nodes.map((n) => n.calls.length);
    const [number] = await batchResults(url, [
      ['eth_blockNumber', []],
      ['eth_getBalance', ['0x0000000000000000000000000000000000000001', 'latest']],
    ]);
    expect(Number(number)).toBe(chain.head);
    const asked = nodes.findIndex((n, i) => n.calls.length > (sent[i] as number));
    // Before: the node's tracked head stayed at the polled one until the next poll, 10 minutes on.
    expect(heads.upstreams[asked]?.head).toBe(chain.head);
    expect(chain.head).toBeGreaterThan(polled);
  });
});

/** The finalized blocks `read` gets at each of 8 new blocks behind serviceWithNodeBehind, each beside the chain's. */
async function finalizedAnswers(read: (url: string) => Promise<number[]>): Promise<Array<[number, number]>> {
  const { url, chain, heads } = await serviceWithNodeBehind();
  const got: Array<[number, number]> = [];
  await eachNewBlock(
    chain,
    () => heads.upstreams.every((u) => u.finalized === chain.head - chain.finalityDepth),
    async () => {
      for (const n of await read(url)) got.push([n, chain.head - chain.finalityDepth]);
    },
  );
  return got;
}

const numberOf = (block: unknown): number => Number((block as { number: string }).number);

describe('the finalized block', () => {
  it('never goes under the highest finalized block a node showed: asked again of a node that has it', async () => {
    const got = await finalizedAnswers(async (url) => {
      const numbers: number[] = [];
      for (let i = 0; i < 4; i++) numbers.push(numberOf(await resultOf(url, 'eth_getBlockByNumber', ['finalized', i % 2 === 0])));
      return numbers;
    });
    // Before: the node behind's answers, a block under the finalized block both nodes' polls showed, about half the time.
    expect(got.filter(([n, finalized]) => n !== finalized)).toEqual([]);
  });

  it('never goes under it inside a batch either', async () => {
    const got = await finalizedAnswers(async (url) => {
      const numbers: number[] = [];
      for (let i = 0; i < 2; i++) {
        const [block, fullBlock, chainId] = await batchResults(url, [
          ['eth_getBlockByNumber', ['finalized', false]],
          ['eth_getBlockByNumber', ['finalized', true]],
          ['eth_chainId', []],
        ]);
        expect(chainId).toBe('0x2a');
        numbers.push(numberOf(block), numberOf(fullBlock));
      }
      return numbers;
    });
    // Before (batches not judged): the node behind's answers, a block under the finalized block both nodes' polls showed.
    expect(got.filter(([n, finalized]) => n !== finalized)).toEqual([]);
  });

  it('never answers a `safe` block under the finalized block, nor under a safe block a node answered: asked again of a node that has it', async () => {
    // The fake nodes' safe block is their finalized block (a devnet's, a chain at rest).
    const got = await finalizedAnswers(async (url) => {
      const numbers: number[] = [];
      for (let i = 0; i < 4; i++) numbers.push(numberOf(await resultOf(url, 'eth_getBlockByNumber', ['safe', i % 2 === 0])));
      return numbers;
    });
    // Before: the node behind's answers, a block under the chain's finalized block, about half the time.
    expect(got.filter(([n, finalized]) => n !== finalized)).toEqual([]);
  });

  it('never answers a `safe` block under it inside a batch either', async () => {
    const got = await finalizedAnswers(async (url) => {
      const numbers: number[] = [];
      for (let i = 0; i < 2; i++) {
        const [block, chainId] = await batchResults(url, [
          ['eth_getBlockByNumber', ['safe', false]],
          ['eth_chainId', []],
        ]);
        expect(chainId).toBe('0x2a');
        numbers.push(numberOf(block));
      }
      return numbers;
    });
    expect(got.filter(([n, finalized]) => n !== finalized)).toEqual([]);
  });

  it("raises what the gateway knows of the answering node's finalized block", async () => {
    const { t, url, chain } = await started.serviceOnEvmNodes(2, { headPollMs: 600_000 });
    const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
    await resultOf(url, 'eth_chainId');
    await until(() => heads.upstreams.every((u) => u.finalized === chain.head - chain.finalityDepth));
    chain.advance(3);
    const block = (await resultOf(url, 'eth_getBlockByNumber', ['finalized', false])) as { number: string };
    expect(Number(block.number)).toBe(chain.head - chain.finalityDepth);
    // Before: the chain's finalized block stayed the polled one until the next poll, 10 minutes on.
    expect(heads.finalized).toBe(chain.head - chain.finalityDepth);
  });
});
