/**
 * The range arithmetic and merging of a wide eth_getLogs split into sub-ranges
 * (src/gateway/upstreams/logsSplit.ts): which calls are split and into what, the logs of each
 * sub-answer taken byte for byte, and the one answer made of them (order, failures, size cap,
 * metering), with a stand-in for the sub-calls' reads.
 */
import { describe, expect, it } from 'vitest';
import type { Admission } from '../../src/gateway/admission.js';
import { type Answer, type CacheUse, draft } from '../../src/gateway/answer.js';
import { parseChainsConfig } from '../../src/gateway/chains.js';
import { rpcError } from '../../src/gateway/errors.js';
import type { RpcCall } from '../../src/gateway/jsonrpc.js';
import {
  blockOf,
  blockRangeCount,
  blockRanges,
  logsSubParams,
  logsTextOf,
  mergedLogsAnswer,
  readSplitLogs,
  SUB_CALLS_AT_ONCE,
} from '../../src/gateway/upstreams/logsSplit.js';

const OPTIONS = { maxBlockRange: 100, maxSplits: 20 };
const KNOWN = { latest: 5_000, finalized: 4_990 };
const hex = (n: number): string => `0x${n.toString(16)}`;
const ADDRESS = '0x00000000000000000000000000000000deadbeef';

describe('blockRanges', () => {
  it('cuts a range at multiples of the maximum, covering every block once, none longer than the maximum', () => {
    expect(blockRanges(100, 1_099, 100)).toHaveLength(10);
    expect(blockRanges(150, 420, 100)).toEqual([
      { from: 150, to: 199 },
      { from: 200, to: 299 },
      { from: 300, to: 399 },
      { from: 400, to: 420 },
    ]);
    expect(blockRanges(7, 7, 100)).toEqual([{ from: 7, to: 7 }]);
    for (let k = 0; k < 500; k++) {
      const max = 1 + Math.floor(Math.random() * 50);
      const from = Math.floor(Math.random() * 1_000);
      const to = from + Math.floor(Math.random() * 500);
      const ranges = blockRanges(from, to, max);
      expect(ranges.length).toBe(blockRangeCount(from, to, max));
      expect(ranges[0]?.from).toBe(from);
      expect(ranges.at(-1)?.to).toBe(to);
      ranges.forEach((r, i) => {
        expect(r.to - r.from + 1).toBeLessThanOrEqual(max);
        if (i > 0) expect(r.from).toBe((ranges[i - 1]?.to ?? -2) + 1);
        // Aligned: every piece but the first starts on a multiple of the maximum.
        if (i > 0) expect(r.from % max).toBe(0);
      });
    }
  });
});

describe('blockOf', () => {
  it('resolves quantities, earliest, latest (and an absent bound) from the tracked head, finalized where known; not safe nor pending', () => {
    expect(blockOf('0x64', KNOWN)).toBe(100);
    expect(blockOf('earliest', null)).toBe(0);
    expect(blockOf('latest', KNOWN)).toBe(5_000);
    expect(blockOf(undefined, KNOWN)).toBe(5_000);
    expect(blockOf('latest', null)).toBeNull();
    expect(blockOf('latest', { latest: null, finalized: null })).toBeNull();
    expect(blockOf('finalized', KNOWN)).toBe(4_990);
    expect(blockOf('finalized', { latest: 5_000, finalized: null })).toBeNull();
    for (const tag of ['safe', 'pending', '0x0064', '100', 100, null, { blockNumber: '0x1' }]) expect(blockOf(tag, KNOWN)).toBeNull();
  });
});

describe('logsSubParams', () => {
  const params = (filter: Record<string, unknown>, ...rest: unknown[]): string => JSON.stringify([filter, ...rest]);

  it('splits a range wider than the maximum into aligned sub-ranges, the rest of the filter as the caller wrote it', () => {
    const filter = { address: ADDRESS, fromBlock: hex(100), toBlock: hex(1_099), topics: [null, '0x01'] };
    const subs = logsSubParams(params(filter), OPTIONS, KNOWN);
    expect(subs).toHaveLength(10);
    expect(subs?.map((p) => JSON.parse(p) as unknown)).toEqual(
      Array.from({ length: 10 }, (_, i) => [{ ...filter, fromBlock: hex(100 + i * 100), toBlock: hex(199 + i * 100) }]),
    );
    // Key order kept: the sub-call is the caller's call with other bounds.
    expect(subs?.[0]).toBe(`[{"address":"${ADDRESS}","fromBlock":"0x64","toBlock":"0xc7","topics":[null,"0x01"]}]`);
  });

  it('leaves whole what needs no split or cannot have one', () => {
    const whole = (text: string | undefined, known = KNOWN as typeof KNOWN | null, options = OPTIONS) => logsSubParams(text, options, known);
    // At most the maximum: as it is, even across an alignment boundary.
    expect(whole(params({ fromBlock: hex(150), toBlock: hex(249) }))).toBeNull();
    expect(whole(params({ blockHash: `0x${'ab'.repeat(32)}`, fromBlock: hex(0), toBlock: hex(1_000) }))).toBeNull();
    for (const tag of ['safe', 'pending', 'finalized?', '0x00']) expect(whole(params({ fromBlock: tag, toBlock: hex(4_000) }))).toBeNull();
    // Reversed: the node's own error.
    expect(whole(params({ fromBlock: hex(1_000), toBlock: hex(100) }))).toBeNull();
    // Past the tracked head: what a node says of blocks it lacks is its own.
    expect(whole(params({ fromBlock: hex(4_500), toBlock: hex(5_001) }))).toBeNull();
    // More sub-calls than the bound: whole, the node's refusal the caller's.
    expect(whole(params({ fromBlock: hex(0), toBlock: hex(2_000) }))).toBeNull();
    expect(whole(params({ fromBlock: hex(0), toBlock: hex(1_999) }))).toHaveLength(20);
    expect(whole(params({ fromBlock: hex(50), toBlock: hex(1_999) }))).toHaveLength(20);
    expect(whole(params({ fromBlock: hex(50), toBlock: hex(2_000) }))).toBeNull();
    // Not a filter.
    for (const text of [undefined, '[]', '{}', '[1]', '[[]]', 'nonsense', 'null']) expect(whole(text)).toBeNull();
    // No head tracking: `latest` is not known.
    expect(whole(params({ fromBlock: hex(0), toBlock: 'latest' }), null)).toBeNull();
  });

  it('resolves latest (or an absent toBlock) to the tracked head, earliest to 0, finalized where the chain follows the tag', () => {
    const subs = logsSubParams(params({ fromBlock: hex(4_750) }), OPTIONS, KNOWN);
    expect(subs?.map((p) => JSON.parse(p) as unknown)).toEqual([
      [{ fromBlock: hex(4_750), toBlock: hex(4_799) }],
      [{ fromBlock: hex(4_800), toBlock: hex(4_899) }],
      [{ fromBlock: hex(4_900), toBlock: hex(4_999) }],
      [{ fromBlock: hex(5_000), toBlock: hex(5_000) }],
    ]);
    expect(logsSubParams(params({ fromBlock: 'earliest', toBlock: hex(150) }), OPTIONS, null)).toHaveLength(2);
    expect(logsSubParams(params({ fromBlock: hex(4_700), toBlock: 'finalized' }), OPTIONS, KNOWN)).toHaveLength(3);
    // Without head tracking, numbers are split as given.
    expect(logsSubParams(params({ fromBlock: hex(0), toBlock: hex(1_000_099) }), { maxBlockRange: 100_000, maxSplits: 20 }, null)).toHaveLength(11);
  });
});

describe('logsTextOf and mergedLogsAnswer', () => {
  it('takes the logs between the brackets byte for byte, and joins them into one answer to the caller id', () => {
    expect(logsTextOf('{"jsonrpc":"2.0","id":1,"result":[{"a":1}, {"b":"x"}]}')).toBe('{"a":1}, {"b":"x"}');
    expect(logsTextOf(Buffer.from('{"jsonrpc":"2.0","id":1,"result":[ ]}'))).toBe('');
    expect(logsTextOf('{"jsonrpc":"2.0","id":1,"result":null}')).toBeNull();
    expect(logsTextOf('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}')).toBeNull();
    expect(logsTextOf('<html>')).toBeNull();
    expect(mergedLogsAnswer('"a"', ['{"a":1}', '', '{"b":2},{"c":3}', ''])).toBe('{"jsonrpc":"2.0","id":"a","result":[{"a":1},{"b":2},{"c":3}]}');
    expect(mergedLogsAnswer('7', ['', ''])).toBe('{"jsonrpc":"2.0","id":7,"result":[]}');
  });
});

describe('readSplitLogs', () => {
  const admission: Admission = { ok: true, caller: { tokenId: 't', accountId: 'a' }, granted: 1, headers: {}, retryAfterSeconds: null };
  const call: RpcCall = { kind: 'call', index: 0, idText: '"caller"', idIsFragile: false, method: 'eth_getLogs', paramsText: '[{}]' };
  const subParams = Array.from({ length: 10 }, (_, i) => JSON.stringify([{ fromBlock: hex(i * 100), toBlock: hex(i * 100 + 99) }]));
  const logOf = (i: number): string => `{"blockNumber":"${hex(i * 100)}","logIndex":"0x0"}`;
  const served = (sub: RpcCall, body: string, use: CacheUse = 'miss', upstreamMs = 5, upstream = 'node-a'): Answer => {
    const d = draft(sub.method, null, null);
    Object.assign(d, { charged: true, cache: use, upstreamMs: use === 'hit' ? null : upstreamMs, upstream: use === 'hit' ? null : upstream });
    return { status: 200, body, contentType: 'application/json', admission, usage: [d] };
  };
  const indexOf = (sub: RpcCall): number => subParams.indexOf(sub.paramsText ?? '');
  const logsAnswer = (sub: RpcCall): string => `{"jsonrpc":"2.0","id":"caller","result":[${logOf(indexOf(sub))}]}`;

  it('answers once with every log in block order, whatever order the sub-calls come back in, a few at a time', async () => {
    let inFlight = 0;
    let most = 0;
    const answer = await readSplitLogs(
      call,
      subParams,
      admission,
      async (sub) => {
        inFlight++;
        most = Math.max(most, inFlight);
        const i = indexOf(sub);
        await new Promise((r) => setTimeout(r, (10 - i) * 3));
        inFlight--;
        return served(sub, logsAnswer(sub), 'miss', 10 + i, `node-${i}`);
      },
      1 << 20,
    );
    expect(most).toBe(SUB_CALLS_AT_ONCE);
    expect(answer.status).toBe(200);
    expect(answer.body).toBe(`{"jsonrpc":"2.0","id":"caller","result":[${subParams.map((_, i) => logOf(i)).join(',')}]}`);
    // One record: charged once, the slowest sub-call's node and time.
    expect(answer.usage).toEqual([
      expect.objectContaining({ method: 'eth_getLogs', rpcErrorCode: null, charged: true, cache: 'miss', upstream: 'node-9', upstreamMs: 19 }),
    ]);
  });

  it('is a cache hit when every sub-range was, answered at once when the reads are', async () => {
    const answer = await readSplitLogs(call, subParams, admission, (sub) => served(sub, logsAnswer(sub), 'hit'), 1 << 20);
    expect(JSON.parse(answer.body as string).result).toHaveLength(10);
    expect(answer.usage[0]).toMatchObject({ cache: 'hit', upstream: null, upstreamMs: null, charged: true });
  });

  it('a failing sub-call is the whole answer (a node error at its 200, a gateway 502 uncharged), and no later sub-call starts', async () => {
    const nodeError = rpcError('"caller"', -32000, 'leveldb: closed');
    let failedYet = false;
    const asked: number[] = [];
    const askedAfterFailure: number[] = [];
    const failing = (status: number, body: string, charged: boolean) => async (sub: RpcCall) => {
      const i = indexOf(sub);
      (failedYet ? askedAfterFailure : asked).push(i);
      await new Promise((r) => setTimeout(r, 5 + i));
      if (i !== 2) return served(sub, logsAnswer(sub));
      failedYet = true;
      const d = draft(sub.method, JSON.parse(body).error.code as number, 'x');
      d.charged = charged;
      const failed: Answer = { status, body, contentType: 'application/json', admission, usage: [d] };
      return failed;
    };
    const answer = await readSplitLogs(call, subParams, admission, failing(200, nodeError, true), 1 << 20);
    expect([answer.status, answer.body, answer.usage[0]?.charged]).toEqual([200, nodeError, true]);
    // The first four, and the two started as the first two came back: none after the failure.
    expect(asked).toEqual([0, 1, 2, 3, 4, 5]);
    expect(askedAfterFailure).toEqual([]);
    failedYet = false;
    const gatewayError = rpcError('"caller"', -32010, 'no healthy upstream for evm');
    const failedAnswer = await readSplitLogs(call, subParams, admission, failing(502, gatewayError, false), 1 << 20);
    expect([failedAnswer.status, failedAnswer.body, failedAnswer.usage[0]?.charged]).toEqual([502, gatewayError, false]);
  });

  it('a sub-answer that is no list of logs is a 502 of the gateway, uncharged', async () => {
    const answer = await readSplitLogs(
      call,
      subParams,
      admission,
      (sub) => served(sub, indexOf(sub) === 4 ? '{"jsonrpc":"2.0","id":"caller","result":null}' : logsAnswer(sub)),
      1 << 20,
    );
    expect(answer.status).toBe(502);
    expect(JSON.parse(answer.body as string)).toMatchObject({ id: 'caller', error: { code: -32010 } });
    expect(answer.usage[0]).toMatchObject({ rpcErrorCode: -32010, charged: false });
  });

  it('logs over the size cap are the 502 -32010 of an answer over the cap, charged, though each sub-answer was under it', async () => {
    const whole = Buffer.byteLength(
      mergedLogsAnswer(
        '"caller"',
        subParams.map((_, i) => logOf(i)),
      ),
    );
    const fits = await readSplitLogs(call, subParams, admission, (sub) => served(sub, logsAnswer(sub)), whole);
    expect(fits.status).toBe(200);
    const over = await readSplitLogs(call, subParams, admission, (sub) => served(sub, logsAnswer(sub)), whole - 1);
    expect(over.status).toBe(502);
    const body = JSON.parse(over.body as string);
    expect(body).toMatchObject({ jsonrpc: '2.0', id: 'caller', error: { code: -32010 } });
    expect(body.error.message).toContain(`answer larger than ${whole - 1} bytes`);
    expect(body.result).toBeUndefined();
    expect(over.usage[0]).toMatchObject({ rpcErrorCode: -32010, charged: true });
  });
});

describe('the chain option', () => {
  const chain = (extra: Record<string, unknown>) => ({
    chains: [{ id: 'evm', name: 'EVM', protocol: 'jsonrpc', upstreams: [{ url: 'http://127.0.0.1:1' }], ...extra }],
  });
  it('is off when unset, takes a bound on sub-calls (20 unless said), and only on jsonrpc chains', () => {
    expect(parseChainsConfig(chain({}), 't').get('evm')?.getLogsSplit).toBeNull();
    expect(parseChainsConfig(chain({ getLogsMaxBlockRange: 2_000 }), 't').get('evm')?.getLogsSplit).toEqual({ maxBlockRange: 2_000, maxSplits: 20 });
    expect(parseChainsConfig(chain({ getLogsMaxBlockRange: 500, getLogsMaxSplits: 8 }), 't').get('evm')?.getLogsSplit).toEqual({
      maxBlockRange: 500,
      maxSplits: 8,
    });
    expect(() => parseChainsConfig(chain({ getLogsMaxSplits: 8 }), 't')).toThrow(/getLogsMaxSplits.*give both/);
    expect(() => parseChainsConfig(chain({ getLogsMaxBlockRange: 0 }), 't')).toThrow(/getLogsMaxBlockRange/);
    expect(() => parseChainsConfig(chain({ protocol: 'rest', rest: 'passthrough', getLogsMaxBlockRange: 100 }), 't')).toThrow(/only jsonrpc/);
  });
});
