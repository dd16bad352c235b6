import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';
import type { FakeEvmChain, ReceivedCall } from './fakeUpstreams.js';

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
