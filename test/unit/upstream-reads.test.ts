import { beforeAll, describe, expect, it } from 'vitest';
import { judgeBatch, judgeSingle, keepableResult, readKey } from '../../src/gateway/cache/rpcReads.js';
import { parseJsonRpc, type RpcCall, splitBatchAnswer } from '../../src/gateway/jsonrpc.js';
import { shapeOf, shapeOfAll } from '../../src/gateway/upstreams/evmCalls.js';
import { type AnswerHead, headOfAnswerText, withHeadNumberText } from '../../src/gateway/upstreams/headAnswers.js';
import { ChainHeads } from '../../src/gateway/upstreams/heads.js';
import { HEAD_PUSH_DIALECTS } from '../../src/gateway/upstreams/pushedHeads.js';
import { RECENT_CALL, solanaShapeOf } from '../../src/gateway/upstreams/solanaCalls.js';

/** What a read depends on, whether a node's answer is one to the call sent, and what may be kept. */

const TRACKING = { family: 'evm' as const, finality: 'finalized' as const, maxLagBlocks: 5, fullNodeHistoryBlocks: 128, pollMs: 1_000 };
const noProbe = async (): Promise<Buffer | null> => null;
/** A block as `eth_getBlockByNumber` gives it (its number and hash), and a node's answer holding it. */
const blockOf = (n: number) => ({ number: `0x${n.toString(16)}`, hash: `0xh${n}` });
const blockAnswer = (n: number): Buffer => Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result: blockOf(n) }));

describe('shapeOf', () => {
  it.each([
    ['eth_chainId', undefined, { kind: 'static', cacheable: true }],
    ['eth_blockNumber', '[]', { kind: 'head', cacheable: true }],
    ['eth_gasPrice', '[]', { kind: 'head', cacheable: false }],
    ['eth_getBalance', '["0x01"]', { kind: 'head', cacheable: true }],
    ['eth_getBalance', '["0x01","latest"]', { kind: 'head', cacheable: true }],
    ['eth_getBalance', '["0x01","pending"]', { kind: 'volatile', cacheable: false }],
    ['eth_getBalance', '["0x01","0x10"]', { kind: 'number', low: 16, high: 16, cacheable: true }],
    ['eth_call', '[{"to":"0x01"},{"blockNumber":"0x20"}]', { kind: 'number', low: 32, high: 32 }],
    ['eth_call', '[{"to":"0x01"},{"blockHash":"0xab"}]', { kind: 'hash', cacheable: false }],
    ['eth_getStorageAt', '["0x01","0x0","earliest"]', { kind: 'number', low: 0, high: 0 }],
    ['eth_getBlockByNumber', '["0x1f",false]', { kind: 'number', low: 31, high: 31 }],
    ['eth_getBlockByNumber', '["finalized",false]', { kind: 'volatile' }],
    ['eth_getBlockByNumber', '["0xzz",false]', { kind: 'other', cacheable: false }],
    ['eth_getTransactionReceipt', '["0xab"]', { kind: 'hash', cacheable: true }],
    ['eth_getLogs', '[{"fromBlock":"0x10","toBlock":"0x20"}]', { kind: 'number', low: 16, high: 32, cacheable: true }],
    ['eth_getLogs', '[{"fromBlock":"0x10"}]', { kind: 'head', low: 16, cacheable: true }],
    ['eth_getLogs', '[{"blockHash":"0xab"}]', { kind: 'hash', cacheable: false }],
    ['eth_getLogs', '[{"fromBlock":"0x10","toBlock":"pending"}]', { kind: 'volatile', cacheable: false }],
    ['eth_sendRawTransaction', '["0x02"]', { kind: 'other', cacheable: false }],
    ['eth_getBalance', '{"not":"an array"}', { kind: 'other', cacheable: false }],
  ])('%s %s', (method, params, expected) => {
    expect(shapeOf(method, params)).toMatchObject(expected);
  });
});

describe('shapeOfAll (a batch sent together)', () => {
  it('depends on the head when one member does, asks the oldest and newest block any member asks', () => {
    const shapes = (...calls: Array<[string, string | undefined]>) => calls.map(([m, p]) => shapeOf(m, p));
    expect(shapeOfAll(shapes(['eth_chainId', undefined], ['eth_getBalance', '["0x01","0x10"]'], ['eth_getBlockByNumber', '["0x30",false]']))).toEqual({
      kind: 'number',
      low: 16,
      high: 48,
      cacheable: false,
    });
    expect(shapeOfAll(shapes(['eth_getBalance', '["0x01","0x10"]'], ['eth_blockNumber', '[]']))).toMatchObject({ kind: 'head', low: 16, high: 16 });
    expect(shapeOfAll(shapes(['eth_chainId', undefined], ['eth_foo', '[]']))).toMatchObject({ kind: 'other', low: -1, high: -1 });
  });
});

describe('judging an answer', () => {
  const answer = (text: string): Buffer => Buffer.from(text);
  it('accepts the id sent, wherever the node writes it, and nothing else', () => {
    expect(judgeSingle(answer('{"jsonrpc":"2.0","id":1,"result":"0x1"}'), '1')).toBe('ok');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","result":{"id":1},"id":1}'), '1')).toBe('ok');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","result":{"id":1},"id":2}'), '1')).toBe('bad');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","id":12,"result":"0x1"}'), '1')).toBe('bad');
    expect(judgeSingle(answer('{ "jsonrpc": "2.0", "id": "a", "result": 1 }'), '"a"')).toBe('ok');
  });

  it('calls garbage and another call id bad, and a pruned node an archive case', () => {
    expect(judgeSingle(answer('<html>maintenance</html>'), '1')).toBe('bad');
    expect(judgeSingle(answer('[{"jsonrpc":"2.0","id":1,"result":1}]'), '1')).toBe('bad');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","id":987654,"result":"0x1"}'), '1')).toBe('bad');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"missing trie node abc (path )"}}'), '1')).toBe('archive');
    expect(judgeSingle(answer('{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"execution reverted"}}'), '1')).toBe('ok');
  });

  it("does not take a revert whose reason names missing state for a node lacking it (the contract's words, not the node's)", () => {
    const revert = (message: string, data = '"0x08c379a0"') =>
      answer(`{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":${JSON.stringify(message)},"data":${data}}}`);
    expect(judgeSingle(revert('execution reverted: header not found'), '1')).toBe('ok');
    expect(judgeSingle(revert('Execution reverted: state pruned'), '1')).toBe('ok');
    expect(judgeSingle(revert('VM Exception while processing transaction: revert', '"missing trie node"'), '1')).toBe('ok');
    expect(judgeSingle(revert('header not found'), '1')).toBe('archive');
  });

  it('takes a result for a result, whatever error members its content holds (a trace)', () => {
    const trace = '{"jsonrpc":"2.0","id":1,"result":{"calls":[{"error":"call failed: historical state is not available"}]}}';
    expect(judgeSingle(answer(trace), '1')).toBe('ok');
  });

  it("calls a node's refusal for want of capacity inside a 200 busy, and a complaint about the call's size the node's answer", () => {
    const refusal = (code: number, message: string) => answer(`{"jsonrpc":"2.0","id":1,"error":{"code":${code},"message":${JSON.stringify(message)}}}`);
    for (const [code, message] of [
      [-32005, 'daily request count exceeded, request rate limited'],
      [-32005, 'project ID request rate exceeded'],
      [429, 'Your app has exceeded its compute units per second capacity. If you have retries enabled, you can safely ignore this message.'],
      [-32000, 'Monthly capacity limit exceeded.'],
      [-32000, 'Too many requests, try again later'],
      [-32000, 'You have exceeded the quota of requests'],
      [-32007, 'request limit reached'],
      [-32603, 'the server is under too much load'],
      [429, 'Too many requests for a specific RPC call, contact your app developer or support@rpcpool.com.'],
      [429, ''],
    ] as const)
      expect(judgeSingle(refusal(code, message), '1'), message).toBe('busy');
    for (const [code, message] of [
      [-32005, 'query returned more than 10000 results'],
      [-32005, 'block range too large'],
      [-32602, 'Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range'],
      [-32005, 'limit the query to 10000 blocks'],
      [3, 'execution reverted: rate limit exceeded'],
      [-32000, 'sender is over rate limit'],
      [-32005, 'Batched requests are not supported by this server'],
      [-32000, 'too many requests in batch, max 100'],
      [-32600, 'batch request limit exceeded'],
      [-32005, 'limit exceeded'],
      [-32000, 'nonce too low'],
    ] as const)
      expect(judgeSingle(refusal(code, message), '1'), message).toBe('ok');
  });
});

describe('judging a batch answer', () => {
  const parsed = parseJsonRpc(
    Buffer.from('[{"jsonrpc":"2.0","id":"a","method":"m"},{"jsonrpc":"2.0","id":"a","method":"m"},{"jsonrpc":"2.0","method":"n"}]'),
    10,
  );
  const calls = (parsed.kind === 'batch' ? parsed.members : []) as RpcCall[];
  const judge = (text: string) => judgeBatch(splitBatchAnswer(Buffer.from(text), calls));

  it('accepts the ids sent (positions), in any order, some missing', () => {
    expect(judge('[{"jsonrpc":"2.0","id":1,"result":"0x2"},{"jsonrpc":"2.0","id":0,"result":"0x1"}]')).toBe('ok');
    expect(judge('[{"jsonrpc":"2.0","id":1,"result":"0x2"},{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}]')).toBe('ok');
  });

  it('calls an answer under an id not sent, sent to a notification, or given twice bad', () => {
    expect(judge('[{"jsonrpc":"2.0","id":1,"result":"0x2"},{"jsonrpc":"2.0","id":1000,"result":"0x1"}]')).toBe('bad');
    expect(judge('[{"jsonrpc":"2.0","id":2,"result":"0x2"}]')).toBe('bad');
    expect(judge('[{"jsonrpc":"2.0","id":0,"result":"0x2"},{"jsonrpc":"2.0","id":0,"result":"0x1"}]')).toBe('bad');
    expect(judge('[{"jsonrpc":"2.0","id":"0","result":"0x2"}]')).toBe('bad');
    expect(judge('<html>')).toBe('bad');
  });

  it('asks an archive node when a member lacks old state', () => {
    expect(judge('[{"jsonrpc":"2.0","id":0,"result":"0x2"},{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"missing trie node 0f (path )"}}]')).toBe(
      'archive',
    );
    expect(
      judge('[{"jsonrpc":"2.0","id":0,"result":"0x2"},{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"execution reverted: missing trie node"}}]'),
    ).toBe('ok');
  });

  it('calls a batch busy when any member was refused for want of capacity, or the whole batch was', () => {
    const limited = '{"code":-32005,"message":"daily request count exceeded, request rate limited"}';
    expect(judge(`[{"jsonrpc":"2.0","id":0,"result":"0x2"},{"jsonrpc":"2.0","id":1,"error":${limited}}]`)).toBe('busy');
    expect(judge(`{"jsonrpc":"2.0","id":null,"error":${limited}}`)).toBe('busy');
    expect(
      judge('[{"jsonrpc":"2.0","id":0,"result":"0x2"},{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"query returned more than 10000 results"}}]'),
    ).toBe('ok');
  });
});

describe('what may be kept', () => {
  const heads = new ChainHeads(TRACKING, ['a'], networkOnlyProbe);
  beforeAll(async () => {
    await saidItsNetwork(heads);
    heads.observe(0, { head: 100, hash: '0xh100', finalized: 90 });
  });
  const body = (result: unknown): Buffer => Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
  const keep = (method: string, params: string, result: unknown, epoch = heads.epoch): string | null =>
    keepableResult(body(result), method, shapeOf(method, params), heads, epoch, 'a');

  it('keeps final data, head data of the current epoch, never nulls, errors or data above the finalized block', () => {
    expect(keep('eth_getBlockByNumber', '["0x5a",false]', { number: '0x5a' })).not.toBeNull();
    expect(keep('eth_getBlockByNumber', '["0x5b",false]', { number: '0x5b' })).toBeNull();
    expect(keep('eth_getBlockByNumber', '["0x5a",false]', null)).toBeNull();
    expect(keep('eth_getTransactionReceipt', '["0xab"]', { blockNumber: '0x50' })).not.toBeNull();
    expect(keep('eth_getTransactionReceipt', '["0xab"]', { blockNumber: '0x60' })).toBeNull();
    expect(keep('eth_blockNumber', '[]', '0x64')).toBe('"0x64"');
    expect(keep('eth_blockNumber', '[]', '0x65')).toBeNull();
    expect(keep('eth_getBalance', '["0x01"]', '0x1', heads.epoch - 1)).toBeNull();
    const error = Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}');
    expect(keepableResult(error, 'eth_chainId', shapeOf('eth_chainId', undefined), heads, heads.epoch, 'a')).toBeNull();
  });

  it('keys head calls by epoch and final ones without it', () => {
    const head = shapeOf('eth_getBalance', '["0x01"]');
    const final = shapeOf('eth_getBalance', '["0x01","0x10"]');
    expect(readKey('eth', 'eth_getBalance', '["0x01"]', head, 3)).not.toBe(readKey('eth', 'eth_getBalance', '["0x01"]', head, 4));
    expect(readKey('eth', 'eth_getBalance', '["0x01","0x10"]', final, 3)).toBe(readKey('eth', 'eth_getBalance', '["0x01","0x10"]', final, 4));
  });
});

describe('pushed heads', () => {
  it("read an EVM header's number, hash and time (its timestamp, in ms), and a Solana slot with neither", () => {
    expect(HEAD_PUSH_DIALECTS.evm.headOf({ number: '0x10', hash: '0xab', timestamp: '0x6763a880', parentHash: '0x01' })).toEqual({
      number: 16,
      hash: '0xab',
      time: Date.parse('2024-12-19T05:00:48Z'),
    });
    expect(HEAD_PUSH_DIALECTS.evm.headOf({ number: '0x10', hash: '0xab' })).toEqual({ number: 16, hash: '0xab', time: null });
    expect(HEAD_PUSH_DIALECTS.solana.headOf({ slot: 301, parent: 300, root: 269 })).toEqual({ number: 301, hash: null, time: null });
  });
});

/** Head tracking of one node whose heads are pushed (polled every minute by `probe`, on `now`'s clock), and its push. */
function pushedNode(probe: (index: number, body: string) => Promise<Buffer | null>, now: () => number) {
  let pushHead: (head: { number: number; hash: string | null }) => void = () => {};
  const h = new ChainHeads({ ...TRACKING, pollMs: 60_000 }, ['pushed'], probe, now, (_, handlers) => {
    pushHead = (head) => handlers.head({ ...head, time: null });
    return { live: true, stop: () => {} };
  });
  return { h, push: (head: { number: number; hash: string | null }) => pushHead(head) };
}

/** pushedNode on a devnet (its finalized block is its head, `head()`, answered to every poll), started and polled once. */
async function polledDevnet(head: () => number, now: () => number) {
  const node = pushedNode(async () => blockAnswer(head()), now);
  node.h.touch();
  await node.h.poll();
  return node;
}

/** A Solana node's answer to the network probe (upstream-network.test.ts): mainnet-beta's genesis hash. */
const GENESIS_ANSWER = Buffer.from('{"jsonrpc":"2.0","id":1,"result":"5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"}');

/** A node that answers only what it is asked of its network (chain id 1, mainnet-beta): what is kept is kept only from a node that said it. */
async function networkOnlyProbe(_: number, body: string): Promise<Buffer | null> {
  if (body.includes('eth_chainId')) return Buffer.from('{"jsonrpc":"2.0","id":1,"result":"0x1"}');
  return body.includes('getGenesisHash') ? GENESIS_ANSWER : null;
}

/** One poll of `heads`, whose nodes answer only networkOnlyProbe: each says its network (its heads come by `observe`). */
async function saidItsNetwork(heads: ChainHeads): Promise<void> {
  heads.touch();
  await heads.poll();
  // No further poll: this probe answers no head, and the tests give theirs by `observe`.
  heads.stop();
}

const RATE_LIMITED = '{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"rate limit exceeded"}}';

/**
 * A Solana node polled `polls` times: its single probes answered (processed 1,000, finalized 968),
 * its probe batches by `batch(n)` (the n-th batch, from 1; null: answered in full). The batches
 * sent, and the node's status, best and finalized slot after each poll.
 */
async function solanaPolled(polls: number, batch: (n: number) => string | null) {
  type Probe = { id: number; params: [{ commitment: string }] };
  let batches = 0;
  const answer = (c: Probe) => ({ jsonrpc: '2.0', id: c.id, result: c.params[0].commitment === 'finalized' ? 968 : 1_000 });
  const probe = async (_: number, body: string): Promise<Buffer> => {
    if (body.includes('getGenesisHash')) return GENESIS_ANSWER;
    const calls = JSON.parse(body) as Probe[] | Probe;
    if (!Array.isArray(calls)) return Buffer.from(JSON.stringify(answer(calls)));
    batches++;
    return Buffer.from(batch(batches) ?? JSON.stringify(calls.map(answer)));
  };
  const h = new ChainHeads({ ...TRACKING, family: 'solana', maxLagBlocks: 50 }, ['sol'], probe);
  h.touch();
  const states: Array<[string | undefined, number | null, number | null]> = [];
  for (let i = 0; i < polls; i++) {
    await h.poll();
    states.push([h.upstreams[0]?.status, h.best, h.finalized]);
  }
  h.stop();
  return { h, batches, states };
}

describe('head tracking', () => {
  it('finds the best head, a lagging node and a liar, and moves the epoch when the best head changes', async () => {
    const h = new ChainHeads(TRACKING, ['a', 'b', 'c'], noProbe);
    h.observe(0, { head: 100, hash: '0x1', finalized: 90 });
    h.observe(1, { head: 92, hash: '0x2', finalized: 85 });
    h.observe(2, { head: 100 + 1e9, hash: '0x3', finalized: 1e9 });
    // The two it leads are asked whether they sync (no answer: not syncing).
    await new Promise((resolve) => setImmediate(resolve));
    expect(h.upstreams.map((u) => u.status)).toEqual(['ok', 'lagging', 'liar']);
    expect([h.best, h.finalized]).toEqual([100, 90]);
    const epoch = h.epoch;
    h.observe(0, { head: 100, hash: '0x1b', finalized: 90 });
    expect(h.epoch).toBe(epoch + 1);
    expect(h.servesHead(1)).toBe(false);
  });

  it("learns each node's safe block from answers to the tag: upward only, never past its head, only a believed node's; the chain's is the highest, the finalized block its floor", () => {
    const h = new ChainHeads(TRACKING, ['a', 'b'], noProbe);
    h.observe(0, { head: 100, hash: '0x1', finalized: 90 });
    h.observe(1, { head: 100, hash: '0x1', finalized: 88 });
    // None answered yet: the floor of a safe answer is the finalized block, and the node whose finalized block it is has it.
    expect([h.safe, h.safeFloor, h.reachesSafe(0), h.reachesSafe(1)]).toEqual([null, 90, true, false]);
    h.sawSafe(1, 95);
    h.sawSafe(1, 93);
    h.sawSafe(0, 101);
    expect([h.safe, h.safeFloor, h.reachesSafe(0), h.reachesSafe(1)]).toEqual([95, 95, false, true]);
    // A node that goes back under the safe block it named learns it again.
    h.observe(1, { head: 94, hash: '0x2', finalized: 88 });
    expect([h.safe, h.safeFloor]).toEqual([null, 90]);
    h.sawSafe(0, 96);
    expect(h.safe).toBe(96);
    // A rewind (a devnet's evm_revert) forgets them all.
    h.observe(0, { head: 80, hash: '0x3', finalized: 80 });
    expect(h.safe).toBeNull();
  });

  it("raises a node's finalized block from an answer to the tag: upward only, never past the node's head, and not by an older poll", () => {
    let now = 1_000;
    const h = new ChainHeads(TRACKING, ['a', 'b'], noProbe, () => now);
    h.observe(0, { head: 100, hash: '0x1', finalized: 90 });
    h.observe(1, { head: 100, hash: '0x1', finalized: 88 });
    h.sawFinalized(1, 89, '0xf89');
    expect([h.upstreams[1]?.finalized, h.finalized]).toEqual([89, 90]);
    h.sawFinalized(1, 87, '0xf87');
    h.sawFinalized(1, 101, '0xf101');
    expect(h.upstreams[1]?.finalized).toBe(89);
    h.sawFinalized(0, 95, '0xf95');
    expect([h.finalized, h.reachesFinalized(0), h.reachesFinalized(1)]).toEqual([95, true, false]);
    // A poll sent before that answer, saying 90: older news, not a rewind.
    const sentAt = now - 10;
    now += 5;
    const epoch = h.epoch;
    h.observe(0, { head: 100, hash: '0x1', finalized: 90, finalizedHash: '0xf90' }, sentAt);
    expect([h.upstreams[0]?.finalized, h.finalized, h.epoch]).toEqual([95, 95, epoch]);
    // A poll sent after it is believed, even one saying less.
    h.observe(0, { head: 101, hash: '0x2', finalized: 93, finalizedHash: '0xf93' }, now);
    expect([h.upstreams[0]?.finalized, h.finalized]).toEqual([93, 93]);
  });

  it("takes an older poll's finalized block where the raised one would pass the head the poll shows (a backend behind the URL): no liar, no rewind", () => {
    let now = 1_000;
    const h = new ChainHeads(TRACKING, ['only'], noProbe, () => now);
    h.observe(0, { head: 100, hash: '0x1', finalized: 90, finalizedHash: '0xf90' });
    const sentAt = now;
    now += 5;
    h.sawFinalized(0, 95, '0xf95');
    const generation = h.generation;
    h.observe(0, { head: 94, hash: '0x0', finalized: 85, finalizedHash: '0xf85' }, sentAt);
    expect([h.upstreams[0]?.status, h.upstreams[0]?.head, h.upstreams[0]?.finalized, h.finalized, h.generation]).toEqual(['ok', 94, 85, 85, generation]);
  });

  it("keeps a finalized block an answer raised while a pushed node's finalized probe was out", async () => {
    let now = 100_000;
    // Polls are answered at once (head 100, finalized 90) until `hold`: then a finalized probe waits in `held`.
    let hold = false;
    const held: Array<(body: Buffer) => void> = [];
    const probe = (_: number, body: string): Promise<Buffer | null> => {
      const finalized = body.includes('"finalized"');
      return hold && finalized ? new Promise((resolve) => held.push(resolve)) : Promise.resolve(blockAnswer(finalized ? 90 : 100));
    };
    const { h, push } = pushedNode(probe, () => now);
    h.touch();
    await h.poll();
    expect([h.best, h.finalized]).toEqual([100, 90]);
    now += 1;
    push({ number: 100, hash: '0xh100' });
    hold = true;
    const polled = h.poll();
    expect(held).toHaveLength(1);
    now += 5;
    h.sawFinalized(0, 95, '0xf95');
    (held[0] as (body: Buffer) => void)(blockAnswer(90));
    await polled;
    expect([h.upstreams[0]?.finalized, h.finalized]).toEqual([95, 95]);
  });

  it('calls a node whose finalized block is above its head a liar only the second poll in a row (once: two probes raced a new block)', () => {
    let now = 1_000;
    const h = new ChainHeads(TRACKING, ['a'], noProbe, () => now);
    h.observe(0, { head: 100, hash: '0x1', finalized: 100 }, now);
    h.observe(0, { head: 100, hash: '0x1', finalized: 101 }, ++now);
    expect([h.upstreams[0]?.status, h.upstreams[0]?.finalized, h.finalized]).toEqual(['ok', 100, 100]);
    h.observe(0, { head: 101, hash: '0x2', finalized: 101 }, ++now);
    h.observe(0, { head: 101, hash: '0x2', finalized: 150 }, ++now);
    expect(h.upstreams[0]?.status).toBe('ok');
    h.observe(0, { head: 101, hash: '0x2', finalized: 150 }, ++now);
    expect(h.upstreams[0]?.status).toBe('liar');
  });

  it("keeps a node's own finalized block, not its head, the first time a poll shows one far above its head", () => {
    let now = 1_000;
    const h = new ChainHeads(TRACKING, ['liar', 'honest'], noProbe, () => now);
    h.observe(0, { head: 1_000, hash: '0x1', finalized: 990 }, now);
    h.observe(1, { head: 1_001, hash: '0x2', finalized: 990 }, now);
    h.observe(0, { head: 1_001, hash: '0x2', finalized: 5_000 }, ++now);
    // Block 1001 is nobody's finalized block: answers at it must not be kept as final.
    expect([h.upstreams[0]?.status, h.upstreams[0]?.finalized, h.finalized]).toEqual(['ok', 990, 990]);
    h.observe(0, { head: 1_001, hash: '0x2', finalized: 5_000 }, ++now);
    expect([h.upstreams[0]?.status, h.finalized]).toEqual(['liar', 990]);
  });

  it('calls a pushed node a liar when two polls of its head and finalized block in a row show the finalized above the head, pushes between them or not', async () => {
    let now = 100_000;
    let finalized = 990;
    const probe = async (_: number, body: string): Promise<Buffer> => blockAnswer(body.includes('"finalized"') ? finalized : 1_000);
    const { h, push } = pushedNode(probe, () => now);
    h.touch();
    await h.poll();
    finalized = 5_000;
    // A new block every few hundred ms, polls every minute: a push comes between any two polls.
    const statuses: string[] = [];
    for (let i = 0; i < 4; i++) {
      push({ number: 1_001 + i, hash: `0xh${1_001 + i}` });
      now += 10;
      await h.poll();
      statuses.push(`${h.upstreams[0]?.status} ${h.upstreams[0]?.finalized}`);
    }
    h.stop();
    // Its finalized block past the pushed head sends the next poll for both; the second such poll calls it a liar.
    expect(statuses).toEqual(['ok 990', 'ok 990', 'ok 990', 'liar 5000']);
  });

  it('does not call a pushed node a liar whose socket is a block behind its HTTP answers (a chain whose finalized block is its head)', async () => {
    let now = 100_000;
    let head = 1_000;
    const { h, push } = await polledDevnet(
      () => head,
      () => now,
    );
    const statuses: string[] = [];
    for (let i = 0; i < 6; i++) {
      head += 1;
      push({ number: head - 1, hash: `0xh${head - 1}` });
      now += 10;
      await h.poll();
      statuses.push(h.upstreams[0]?.status as string);
    }
    h.stop();
    expect(statuses).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
  });

  it.each([
    ['the next poll', false],
    ['the next poll after one that was lost', true],
  ])("does not take a pushed head under a finalized block an answer raised lately: %s asks the node's head", async (_, losesOne) => {
    let now = 100_000;
    let fail = false;
    const sent: string[] = [];
    const probe = async (_: number, body: string): Promise<Buffer | null> => {
      sent.push(body);
      return fail ? null : blockAnswer(body.includes('"finalized"') ? 95 : 100);
    };
    const { h, push } = pushedNode(probe, () => now);
    h.touch();
    await h.poll();
    now += 10;
    push({ number: 101, hash: '0xh101' });
    h.sawHead(0, 102, '0xh102');
    h.sawFinalized(0, 101, '0xf101');
    const generation = h.generation;
    now += 10;
    // The socket's backend behind the one that answered, or the node rewound: not known yet.
    push({ number: 100, hash: '0xh100' });
    expect([h.generation, h.upstreams[0]?.status, h.upstreams[0]?.head, h.upstreams[0]?.finalized]).toEqual([generation, 'ok', 102, 101]);
    if (losesOne) {
      fail = true;
      await h.poll();
      fail = false;
    }
    sent.length = 0;
    await h.poll();
    h.stop();
    expect(sent.some((body) => body.includes('"latest"'))).toBe(true);
  });

  it('sees a pushed devnet rewind under a finalized block an answer raised (evm_revert sent to the node directly)', async () => {
    let now = 100_000;
    let head = 100;
    const { h, push } = await polledDevnet(
      () => head,
      () => now,
    );
    now += 10;
    head = 102;
    push({ number: 101, hash: '0xh101' });
    h.sawHead(0, 102, '0xh102');
    h.sawFinalized(0, 102, '0xh102');
    const generation = h.generation;
    now += 10;
    head = 100;
    push({ number: 100, hash: '0xh100b' });
    await h.poll();
    h.stop();
    expect([h.generation, h.upstreams[0]?.head, h.finalized]).toEqual([generation + 1, 100, 100]);
  });

  it('sends a Solana node its probes in a batch again after an error that is not about batches', async () => {
    const { h, batches } = await solanaPolled(4, (n) => (n === 1 ? RATE_LIMITED : null));
    expect([batches, h.best, h.finalized]).toEqual([4, 1_000, 968]);
  });

  it.each([
    ['-32600', '{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch requests are not supported"}}'],
    ['-32700 (a proxy that cannot read an array)', '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'],
  ])('polls a Solana node that answers the batch %s one probe at a time, and stops sending the batch after 3 such polls', async (_, refusal) => {
    const { batches, states } = await solanaPolled(4, () => refusal);
    // Tracked from the first poll.
    expect(states[0]).toEqual(['ok', 1_000, 968]);
    expect(batches).toBe(3);
  });

  it('keeps sending a Solana node its probes in a batch through polls where a rate limit answered it', async () => {
    const { h, batches } = await solanaPolled(5, () => RATE_LIMITED);
    expect([batches, h.best]).toEqual([5, 1_000]);
  });

  it("asks a Solana node's processed and finalized slots in one batch: one backend answers both", async () => {
    // A public endpoint whose backends are 13 s (~32 slots) apart: separate requests could read processed from the one behind.
    const sent: string[] = [];
    const probe = async (_: number, body: string): Promise<Buffer> => {
      if (body.includes('getGenesisHash')) return GENESIS_ANSWER;
      sent.push(body);
      const calls = JSON.parse(body) as Array<{ id: number; params: [{ commitment: string }] }> | { id: number; params: [{ commitment: string }] };
      const slotOf = (c: { params: [{ commitment: string }] }, base: number) => (c.params[0].commitment === 'finalized' ? base - 32 : base);
      if (!Array.isArray(calls))
        return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: calls.id, result: slotOf(calls, calls.params[0].commitment === 'finalized' ? 1_042 : 1_000) }));
      return Buffer.from(JSON.stringify(calls.map((c) => ({ jsonrpc: '2.0', id: c.id, result: slotOf(c, 1_000) })).reverse()));
    };
    const h = new ChainHeads({ ...TRACKING, family: 'solana', maxLagBlocks: 50 }, ['sol'], probe);
    h.touch();
    await h.poll();
    h.stop();
    expect(sent).toHaveLength(1);
    expect([h.upstreams[0]?.status, h.best, h.finalized, h.confirmed]).toEqual(['ok', 1_000, 968, 1_000]);
  });

  describe('nodes far apart (a node syncing from scratch, or a liar)', () => {
    /** EVM nodes at these heads, each answering eth_syncing with its `syncing` (false, or an object with the network's head); polled `polls` times. */
    type FarNode = { head: number; syncing?: false | { highestBlock: number }; ageMs?: number };
    /**
     * EVM nodes at these heads (changeable), each answering eth_syncing with its `syncing` (false,
     * or an object with the network's head), on a clock `advance` moves: the nodes asked, and
     * what the gateway made of the heads while they were asked.
     */
    function farApart(nodes: FarNode[]) {
      let now = Date.parse('2026-11-29T12:00:00Z');
      const asked: number[] = [];
      const whileAsked: Array<{ statuses: string[]; best: number | null }> = [];
      const probe = async (index: number, body: string): Promise<Buffer> => {
        const node = nodes[index] as FarNode;
        const method = (JSON.parse(body) as { method: string }).method;
        if (method === 'eth_syncing') {
          asked.push(index);
          // As the node thinks over it: what the gateway has made of the poll by then.
          await new Promise((resolve) => setImmediate(resolve));
          whileAsked.push({ statuses: h.upstreams.map((u) => u.status), best: h.best });
        }
        const syncing = node.syncing
          ? { startingBlock: '0x0', currentBlock: `0x${node.head.toString(16)}`, highestBlock: `0x${node.syncing.highestBlock.toString(16)}` }
          : false;
        // Its head block's time, where the node has one: `ageMs` before the clock.
        const latest =
          node.ageMs === undefined ? blockOf(node.head) : { ...blockOf(node.head), timestamp: `0x${Math.floor((now - node.ageMs) / 1000).toString(16)}` };
        const result = method === 'eth_syncing' ? syncing : body.includes('"finalized"') ? blockOf(Math.max(0, node.head - 64)) : latest;
        return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
      };
      const h = new ChainHeads(
        TRACKING,
        nodes.map((_, i) => `n${i}`),
        probe,
        () => now,
      );
      h.touch();
      return {
        h,
        asked,
        whileAsked,
        statuses: () => h.upstreams.map((u) => u.status),
        poll: async (times = 1) => {
          for (let i = 0; i < times; i++) await h.poll();
        },
        /** Time passes, and a call comes (the chain is in use). */
        advance: (ms: number) => {
          now += ms;
          h.touch();
        },
      };
    }
    async function nodesAt(nodes: FarNode[], polls = 1) {
      const far = farApart(nodes);
      await far.poll(polls);
      far.h.stop();
      return far;
    }
    const NETWORK = 20_000_000;

    it('takes the one behind for a lagging node when it says it is syncing, not the other for a liar (two nodes)', async () => {
      const { h, asked, statuses } = await nodesAt([{ head: NETWORK }, { head: 1_000, syncing: { highestBlock: NETWORK } }], 4);
      // Before: the node at the head was the liar, and every call went to the one syncing.
      expect([statuses(), h.best]).toEqual([['ok', 'lagging'], NETWORK]);
      // Asked once, not at every poll.
      expect(asked).toEqual([1]);
    });

    it('calls the one ahead a liar when the one behind says it is not syncing, and keeps it so poll after poll without asking again', async () => {
      const { h, asked, statuses } = await nodesAt([{ head: NETWORK + 1e9 }, { head: NETWORK, syncing: false }], 4);
      expect([statuses(), h.best]).toEqual([['liar', 'ok'], NETWORK]);
      expect(asked).toEqual([1]);
    });

    const MINUTE = 60_000;
    const DAY = 24 * 60 * MINUTE;

    it('takes a node far behind whose head block is days old for a stalled one, when it says it is not syncing, not the one ahead for a liar (two nodes)', async () => {
      // A node that lost its peers a week ago, beside one whose head is 12 s old.
      const { h, asked, statuses } = await nodesAt(
        [
          { head: NETWORK, ageMs: 12_000 },
          { head: NETWORK - 50_400, syncing: false, ageMs: 7 * DAY },
        ],
        4,
      );
      // Before: the one ahead was the liar, and every call went to the stalled one.
      expect([statuses(), h.best]).toEqual([['ok', 'lagging'], NETWORK]);
      expect(asked).toEqual([1]);
    });

    it('takes an error or no answer to eth_syncing for no word of the node: the one ahead stays the liar, and it is asked again a poll on', async () => {
      const behindAnswering = async (answer: 'false' | 'error' | 'none') => {
        const now = Date.parse('2026-11-29T12:00:00Z');
        const nodes = [
          { head: NETWORK, ageMs: 12_000 },
          { head: NETWORK - 50_400, ageMs: 7 * DAY },
        ];
        let asked = 0;
        const probe = async (index: number, body: string): Promise<Buffer | null> => {
          const node = nodes[index] as { head: number; ageMs: number };
          if (body.includes('eth_syncing')) {
            asked++;
            if (answer === 'none') return null;
            return Buffer.from(
              answer === 'error' ? '{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"rate limited"}}' : '{"jsonrpc":"2.0","id":1,"result":false}',
            );
          }
          const n = body.includes('"finalized"') ? node.head - 64 : node.head;
          return Buffer.from(
            JSON.stringify({ jsonrpc: '2.0', id: 1, result: { ...blockOf(n), timestamp: `0x${Math.floor((now - node.ageMs) / 1000).toString(16)}` } }),
          );
        };
        let clock = now;
        const h = new ChainHeads(TRACKING, ['ahead', 'behind'], probe, () => clock);
        h.touch();
        for (let i = 0; i < 3; i++) {
          await h.poll();
          clock += TRACKING.pollMs;
          h.touch();
        }
        h.stop();
        return { statuses: h.upstreams.map((u) => u.status), asked };
      };
      expect(await behindAnswering('false')).toEqual({ statuses: ['ok', 'lagging'], asked: 1 });
      // Before: a rate limit or a timeout counted as the node saying it is not syncing, for good.
      for (const answer of ['error', 'none'] as const) {
        const { statuses, asked } = await behindAnswering(answer);
        expect([answer, statuses]).toEqual([answer, ['liar', 'ok']]);
        expect(asked).toBeGreaterThan(1);
      }
    });

    it('judges the one ahead while nodes it leads answer eth_syncing slowly with no word, at different speeds; one without the method is not asked again', async () => {
      // Two nodes far behind whose eth_syncing fails slowly: an error after 1.25 poll intervals, no answer after 2.5.
      const pollMs = 200;
      const nodes = [
        { head: NETWORK, ageMs: 12_000 },
        { head: NETWORK - 50_400, ageMs: 7 * DAY },
        { head: NETWORK - 50_400, ageMs: 7 * DAY },
      ];
      const syncingAsked = [0, 0, 0];
      let lacksMethod = false;
      const probe = async (index: number, body: string): Promise<Buffer | null> => {
        const node = nodes[index] as { head: number; ageMs: number };
        if (body.includes('eth_syncing')) {
          syncingAsked[index] = (syncingAsked[index] as number) + 1;
          if (lacksMethod) return Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method eth_syncing does not exist"}}');
          await new Promise((resolve) => setTimeout(resolve, index === 1 ? 250 : 500));
          return index === 1 ? Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"rate limited"}}') : null;
        }
        const n = body.includes('"finalized"') ? node.head - 64 : node.head;
        return Buffer.from(
          JSON.stringify({ jsonrpc: '2.0', id: 1, result: { ...blockOf(n), timestamp: `0x${Math.floor((Date.now() - node.ageMs) / 1000).toString(16)}` } }),
        );
      };
      const run = async () => {
        const h = new ChainHeads({ ...TRACKING, pollMs }, ['ahead', 'behind1', 'behind2'], probe);
        const seen = new Set<string>();
        const end = Date.now() + 2_000;
        while (Date.now() < end) {
          h.touch();
          await h.poll();
          seen.add(h.upstreams.map((u) => u.status).join(','));
        }
        h.stop();
        return { seen: [...seen], best: h.best };
      };
      // Before: each answer made the other one due again, the verdict waited for ever (statuses and best head frozen).
      expect(await run()).toMatchObject({ seen: expect.arrayContaining(['liar,ok,ok']), best: NETWORK - 50_400 });
      syncingAsked.fill(0);
      lacksMethod = true;
      await run();
      expect(syncingAsked).toEqual([0, 1, 1]);
    });

    it.each([
      ['its own head is not current (2 h old)', { ageMs: 2 * 60 * MINUTE }, { ageMs: 7 * DAY }],
      ['its head block is an hour past the clock', { ageMs: -60 * MINUTE }, { ageMs: 7 * DAY }],
      ["the other's head is current too (one of them lies about its number)", { ageMs: 12_000 }, { ageMs: 30_000 }],
      ['the other says no time', { ageMs: 12_000 }, {}],
    ])('still calls the one ahead a liar when %s', async (_, ahead, behind) => {
      const { statuses } = await nodesAt(
        [
          { head: NETWORK, ...ahead },
          { head: NETWORK - 50_400, syncing: false, ...behind },
        ],
        2,
      );
      expect(statuses()).toEqual(['liar', 'ok']);
    });

    it('with two nodes syncing far behind a third, believes the third and asks each of them once', async () => {
      const { h, asked, statuses } = await nodesAt(
        [{ head: NETWORK }, { head: 500, syncing: { highestBlock: NETWORK } }, { head: 400, syncing: { highestBlock: NETWORK } }],
        4,
      );
      expect([statuses(), h.best]).toEqual([['ok', 'lagging', 'lagging'], NETWORK]);
      expect(asked.sort()).toEqual([1, 2]);
    });

    it('calls a node far past the network head a node syncing reports a liar', async () => {
      const { h, statuses } = await nodesAt([{ head: NETWORK + 1e9 }, { head: 1_000, syncing: { highestBlock: NETWORK } }], 2);
      expect([statuses(), h.best]).toEqual([['liar', 'ok'], 1_000]);
    });

    it('does not call the one at the head a liar while two nodes far behind it are asked whether they sync', async () => {
      const { whileAsked, statuses, h } = await nodesAt(
        [{ head: NETWORK }, { head: 500, syncing: { highestBlock: NETWORK } }, { head: 400, syncing: { highestBlock: NETWORK } }],
        1,
      );
      // Before: the liar for the round trip, the best head 500.
      expect(whileAsked.length).toBeGreaterThan(0);
      expect(whileAsked.filter((w) => w.statuses[0] === 'liar' || w.best === 500)).toEqual([]);
      expect([statuses(), h.best]).toEqual([['ok', 'lagging', 'lagging'], NETWORK]);
    });

    it('asks a node syncing again when the one at the head has moved past the network head it said, a minute on', async () => {
      const nodes: FarNode[] = [{ head: NETWORK }, { head: 1_000, syncing: { highestBlock: NETWORK } }];
      const far = farApart(nodes);
      await far.poll();
      expect(far.statuses()).toEqual(['ok', 'lagging']);
      // ~40 minutes of Arbitrum's blocks later (the clock moved a minute here): the head is past what it said by more than 10,000.
      (nodes[0] as FarNode).head = NETWORK + 10_001;
      (nodes[1] as FarNode).syncing = { highestBlock: NETWORK + 10_001 };
      far.advance(61_000);
      await far.poll();
      far.h.stop();
      // Before: the one at the head was the liar for good, every call to the one syncing.
      expect([far.statuses(), far.h.best, far.asked]).toEqual([['ok', 'lagging'], NETWORK + 10_001, [1, 1]]);
    });

    it('measures a node syncing that knows no network head by its own head: a liar beside it is a liar', async () => {
      const { h, statuses } = await nodesAt([{ head: NETWORK + 1e9 }, { head: 1_000, syncing: { highestBlock: 1_000 } }], 2);
      expect([statuses(), h.best]).toEqual([['liar', 'ok'], 1_000]);
    });

    it('keeps the best head while a new liar is judged (the one at the head is asked)', async () => {
      const nodes: Array<{ head: number; syncing?: false | { highestBlock: number } }> = [
        { head: NETWORK, syncing: false },
        { head: 1_000, syncing: { highestBlock: NETWORK } },
      ];
      let liarHead: number | null = null;
      const bests: Array<number | null> = [];
      const probe = async (index: number, body: string): Promise<Buffer | null> => {
        const method = (JSON.parse(body) as { method: string }).method;
        if (index === 2) return liarHead === null ? null : blockAnswer(liarHead);
        const node = nodes[index] as (typeof nodes)[number];
        if (method === 'eth_syncing') {
          // As the node thinks over it: what the gateway has made of the poll by then.
          await new Promise((resolve) => setImmediate(resolve));
          bests.push(h.best);
          const result = node.syncing ? { currentBlock: `0x${node.head.toString(16)}`, highestBlock: `0x${node.syncing.highestBlock.toString(16)}` } : false;
          return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
        }
        return blockAnswer(body.includes('"finalized"') ? Math.max(0, node.head - 64) : node.head);
      };
      const h = new ChainHeads(TRACKING, ['a', 'b', 'liar'], probe);
      h.touch();
      await h.poll();
      await h.poll();
      expect([h.best, h.upstreams.map((u) => u.status)]).toEqual([NETWORK, ['ok', 'lagging', 'unknown']]);
      liarHead = NETWORK + 1e9;
      await h.poll();
      h.stop();
      // While the one at the head was asked, the best head stayed (before: it fell to the node syncing).
      expect(bests.every((b) => b === NETWORK)).toBe(true);
      expect([h.best, h.upstreams.map((u) => u.status)]).toEqual([NETWORK, ['ok', 'lagging', 'liar']]);
    });
  });

  it('believes a node that jumps to where the other nodes are (caught up after a resync)', () => {
    const h = new ChainHeads(TRACKING, ['a', 'b', 'c'], noProbe);
    h.observe(0, { head: 20_000_000, hash: '0x1', finalized: 19_999_936 }, 1);
    h.observe(1, { head: 20_000_000, hash: '0x1', finalized: 19_999_936 }, 1);
    h.observe(2, { head: 5_000, hash: '0x2', finalized: 4_936 }, 1);
    expect(h.upstreams[2]?.status).toBe('lagging');
    h.observe(2, { head: 20_000_000, hash: '0x1', finalized: 19_999_936 }, 2);
    // Before: a liar for good, its jump measured from the head it had while behind.
    expect(h.upstreams[2]?.status).toBe('ok');
  });

  it('leaves the finalized block alone where it is a depth under the head (no tag to judge answers by)', () => {
    const h = new ChainHeads({ ...TRACKING, finality: 12 }, ['a'], noProbe);
    h.observe(0, { head: 100, hash: '0x1', finalized: 88 });
    h.sawFinalized(0, 95, '0xf95');
    expect([h.followsFinalizedTag, h.finalized]).toEqual([false, 88]);
  });

  it('calls a lone node that jumps 10^9 blocks a liar, and believes it again after an outage', () => {
    const h = new ChainHeads(TRACKING, ['only'], noProbe);
    h.observe(0, { head: 100, hash: '0x1', finalized: 90 });
    h.observe(0, { head: 100 + 1e9, hash: '0x2', finalized: 90 });
    expect([h.upstreams[0]?.status, h.best, h.finalized]).toEqual(['liar', 100, 90]);
    h.failed(0);
    h.observe(0, { head: 50_000, hash: '0x3', finalized: 49_990 });
    expect([h.upstreams[0]?.status, h.best]).toEqual(['ok', 50_000]);
  });
});

describe('Solana calls', () => {
  it('read a minContextSlot wherever the params name it, and nothing else', () => {
    expect(solanaShapeOf('getBalance', undefined)).toEqual(RECENT_CALL);
    expect(solanaShapeOf('getBalance', '["83astBRguLMdt2h5U1Tpdq5tjFoJ6noeGwaY3mDLVcri"]')).toEqual(RECENT_CALL);
    expect(solanaShapeOf('getBalance', '["83ast",{"commitment":"confirmed","minContextSlot":301234600}]')).toMatchObject({ kind: 'recent', high: 301234600 });
    expect(solanaShapeOf('getBalance', '[{"minContextSlot": 7 }]')).toMatchObject({ kind: 'recent', high: 7 });
    expect(solanaShapeOf('getBalance', '[{"minContextSlot":"7"}]')).toEqual(RECENT_CALL);
    expect(solanaShapeOf('getBalance', '[{"minContextSlot":99999999999999999}]')).toEqual(RECENT_CALL);
  });

  it('read the slot a block call names, and getSlot as a head call by its commitment (Agave defaults to finalized)', () => {
    expect(solanaShapeOf('getBlock', '[301234500,{"maxSupportedTransactionVersion":0}]')).toMatchObject({ kind: 'recent', high: 301234500 });
    expect(solanaShapeOf('getBlocks', '[100,200]')).toMatchObject({ high: 200 });
    expect(solanaShapeOf('getBlocksWithLimit', '[100,5000]')).toMatchObject({ high: 100 });
    expect(solanaShapeOf('getBlock', '["not a slot"]')).toEqual(RECENT_CALL);
    expect(solanaShapeOf('getSlot', undefined).headAnswer).toBe('finalizedSlot');
    expect(solanaShapeOf('getSlot', '[]').headAnswer).toBe('finalizedSlot');
    expect(solanaShapeOf('getSlot', '[{"commitment":"processed"}]').headAnswer).toBe('slot');
    expect(solanaShapeOf('getSlot', '[{"commitment":"recent"}]').headAnswer).toBe('slot');
    expect(solanaShapeOf('getSlot', '[{"commitment":"confirmed"}]').headAnswer).toBe('confirmedSlot');
    expect(solanaShapeOf('getSlot', '[{"commitment":"singleGossip"}]').headAnswer).toBe('confirmedSlot');
    expect(solanaShapeOf('getSlot', '[{"commitment":"nonsense"}]').headAnswer).toBeUndefined();
    const answer = headOfAnswerText('{"jsonrpc":"2.0","result":301234560,"id":1}', 'slot');
    expect(answer?.number).toBe(301234560);
    expect(withHeadNumberText(answer as AnswerHead, 301234567)).toBe('{"jsonrpc":"2.0","result":301234567,"id":1}');
    expect(headOfAnswerText('{"jsonrpc":"2.0","result":18446744073709551615,"id":1}', 'slot')).toBeNull();
  });

  it('keep a block and a block time at a finalized slot, and a transaction whose slot is finalized; nothing else', async () => {
    const h = new ChainHeads({ ...TRACKING, family: 'solana', maxLagBlocks: 50 }, ['sol'], networkOnlyProbe);
    await saidItsNetwork(h);
    h.observe(0, { head: 1_032, hash: null, finalized: 1_000 }, 1);
    const kept = (method: string, params: string, result: unknown) =>
      keepableResult(Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result })), method, solanaShapeOf(method, params), h, h.epoch, 'sol') !== null;
    expect(kept('getBlock', '[1000,{"maxSupportedTransactionVersion":0}]', { blockhash: 'b1000' })).toBe(true);
    expect(kept('getBlock', '[1001]', { blockhash: 'b1001' })).toBe(false);
    expect(kept('getBlockTime', '[990]', 1_732_000_000)).toBe(true);
    // A node whose ledger starts after 900 answers a shorter list, or none, with no error: never kept.
    expect(kept('getBlocks', '[900,1000]', [900, 901])).toBe(false);
    expect(kept('getBlocks', '[900]', [900, 901])).toBe(false);
    expect(kept('getBlocksWithLimit', '[900,10]', [900, 901])).toBe(false);
    expect(kept('getBlockCommitment', '[900]', { totalStake: 1 })).toBe(false);
    expect(kept('getTransaction', '["sig"]', { slot: 999, meta: {} })).toBe(true);
    expect(kept('getTransaction', '["sig"]', { slot: 1_010, meta: {} })).toBe(false);
    expect(kept('getTransaction', '["sig"]', null)).toBe(false);
    expect(kept('getBalance', '["83ast"]', { context: { slot: 990 }, value: 1 })).toBe(false);
  });

  it("judge Agave's -32016 as a node behind the call's slot, alone; in a batch the member's answer stands", () => {
    const notReached = '{"code":-32016,"message":"Minimum context slot has not been reached","data":{"contextSlot":5}}';
    expect(judgeSingle(Buffer.from(`{"jsonrpc":"2.0","error":${notReached},"id":1}`), '1')).toBe('behind');
    expect(judgeSingle(Buffer.from('{"jsonrpc":"2.0","error":{"code":-32016,"message":"something else"},"id":1}'), '1')).toBe('ok');
    const batch = `[{"jsonrpc":"2.0","error":${notReached},"id":0}]`;
    const parsed = parseJsonRpc(Buffer.from('[{"jsonrpc":"2.0","id":7,"method":"getBalance","params":["x",{"minContextSlot":9}]}]'), 10);
    const calls = (parsed.kind === 'batch' ? parsed.members : []) as RpcCall[];
    expect(judgeBatch(splitBatchAnswer(Buffer.from(batch), calls))).toBe('ok');
  });
});
