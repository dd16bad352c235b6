import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';
import type { EvmNodeFake, FakeEvmChain, ReceivedCall } from './fakeUpstreams.js';

/** An eth_getLogs filter's block bounds, as sent. */
export interface LogsFilter {
  fromBlock?: string;
  toBlock?: string;
}

/** A single JSON-RPC call as a fake node received it. */
export interface SentRpc {
  id?: unknown;
  method?: string;
  params?: [LogsFilter];
}

/** A filter bound as the fake node reads it: a tag or an absent bound is its chain's head (or 0). */
export const blockOfTag = (tag: string | undefined, chain: FakeEvmChain): number =>
  tag === undefined || tag === 'latest' ? chain.head : tag === 'earliest' ? 0 : Number.parseInt(tag, 16);

/** A caller's eth_getLogs (single or in a batch) a node received: not the gateway's head polls. */
export const isGetLogs = (call: ReceivedCall): boolean => call.headers[HEAD_POLL_HEADER] === undefined && call.body.includes('"eth_getLogs"');

/** What a fake node answers to an eth_getLogs over a range: a node error object, a raw body, or (null) the fake's own answer. */
export type LogsAnswer = { error: { code: number; message: string } } | { raw: string } | null;

/** Makes `node` answer each single eth_getLogs over `[from, to]` as `answer` says; every other call as the fake answers. */
export function answerGetLogs(node: EvmNodeFake, chain: FakeEvmChain, answer: (range: [number, number]) => LogsAnswer): void {
  node.rewrite = (body, call) => {
    if (!isGetLogs(call) || call.body.startsWith('[')) return body;
    const sent = JSON.parse(call.body) as SentRpc;
    const filter = sent.params?.[0] ?? {};
    const given = answer([blockOfTag(filter.fromBlock, chain), blockOfTag(filter.toBlock, chain)]);
    if (given === null) return body;
    return 'raw' in given ? given.raw : JSON.stringify({ jsonrpc: '2.0', id: sent.id, error: given.error });
  };
}
