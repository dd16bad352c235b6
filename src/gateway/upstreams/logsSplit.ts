import type { MaybePromise } from '../../domain/maybePromise.js';
import type { Admission } from '../admission.js';
import { type Answer, type CacheUse, draft, type UsageDraft } from '../answer.js';
import { answerWithResult } from '../cache/rpcReads.js';
import type { HeadTracking, LogsSplitting } from '../chains.js';
import { JSON_CONTENT_TYPE, RpcCode, rpcError } from '../errors.js';
import type { RpcCall } from '../jsonrpc.js';
import { documentStart, objectMembers } from '../jsonScan.js';
import { answerTooLargeMessage } from '../upstream.js';
import { blockNumberOf } from './evmCalls.js';
import type { ChainHeads } from './heads.js';

/**
 * An eth_getLogs over more blocks than the chain's nodes take (`getLogsMaxBlockRange`: Alchemy's
 * 2K, "exceed maximum block range: 5000"...) sent as consecutive sub-ranges, each a read of its
 * own (cache, coalescing, retries, hedging, archive routing), a few at a time, their logs merged
 * into one answer as one node would have given it (docs/decisions.md, "A wide eth_getLogs is
 * split into sub-ranges"). The range arithmetic and the merging are pure.
 */

/** A block range, both ends included. */
export interface BlockRange {
  from: number;
  to: number;
}

/**
 * Blocks the gateway knows for tags: the tracked best head (`latest`) and, where the chain
 * follows its nodes' `finalized` tag, the finalized block; null: not known (not yet polled).
 */
export interface KnownBlocks {
  latest: number | null;
  finalized: number | null;
}

/** Sub-calls in flight at once for one caller's call. */
export const SUB_CALLS_AT_ONCE = 4;

const hex = (n: number): string => `0x${n.toString(16)}`;

/** What the gateway knows of a chain's blocks; null: no head tracking (numbers and `earliest` only). */
export function knownBlocksOf(heads: ChainHeads | null, tracking: HeadTracking | null): KnownBlocks | null {
  if (heads === null || tracking === null) return null;
  // A finality by depth is the gateway's own figure: a node's `finalized` tag may say otherwise.
  return { latest: heads.best, finalized: tracking.finality === 'finalized' ? heads.finalized : null };
}

/**
 * A filter's block as a number: a quantity, `earliest` (0), `latest` or an absent bound (the
 * tracked head), `finalized` (where known). Null: not resolved here (`safe`, `pending`, an
 * unknown head, anything else): the call then goes whole.
 */
export function blockOf(value: unknown, known: KnownBlocks | null): number | null {
  if (value === undefined || value === 'latest') return known?.latest ?? null;
  if (value === 'earliest') return 0;
  if (value === 'finalized') return known?.finalized ?? null;
  return blockNumberOf(value);
}

/**
 * `from..to` cut at multiples of `maxBlockRange` (each piece at most that many blocks): the same
 * blocks give the same sub-calls whatever range they are part of, so final sub-ranges kept in the
 * cache serve the next caller's overlapping range.
 */
export function blockRanges(from: number, to: number, maxBlockRange: number): BlockRange[] {
  const ranges: BlockRange[] = [];
  for (let start = from; start <= to; ) {
    const end = Math.min(to, (Math.floor(start / maxBlockRange) + 1) * maxBlockRange - 1);
    ranges.push({ from: start, to: end });
    start = end + 1;
  }
  return ranges;
}

/** How many pieces blockRanges would cut `from..to` into, without cutting it. */
export const blockRangeCount = (from: number, to: number, maxBlockRange: number): number =>
  Math.floor(to / maxBlockRange) - Math.floor(from / maxBlockRange) + 1;

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The params of each sub-call an eth_getLogs with `paramsText` is split into, in block order, or
 * null when it goes whole: a range the nodes take as it is, a `blockHash` filter, a bound not
 * resolved (blockOf), an empty or reversed range (the node's own answer), a range reaching past
 * the tracked head (what a node says of blocks it lacks is its own), or one needing more than
 * `maxSplits` sub-calls (the node's refusal is then the caller's, as without splitting).
 */
export function logsSubParams(paramsText: string | undefined, options: LogsSplitting, known: KnownBlocks | null): string[] | null {
  if (paramsText === undefined) return null;
  let params: unknown;
  try {
    params = JSON.parse(paramsText);
  } catch {
    return null;
  }
  if (!Array.isArray(params) || !isPlainObject(params[0])) return null;
  const filter = params[0];
  if (filter.blockHash !== undefined) return null;
  const from = blockOf(filter.fromBlock, known);
  const to = blockOf(filter.toBlock, known);
  if (from === null || to === null || from > to || to - from + 1 <= options.maxBlockRange) return null;
  if (known?.latest !== null && known?.latest !== undefined && to > known.latest) return null;
  if (blockRangeCount(from, to, options.maxBlockRange) > options.maxSplits) return null;
  const rest = params.slice(1);
  return blockRanges(from, to, options.maxBlockRange).map((r) => JSON.stringify([{ ...filter, fromBlock: hex(r.from), toBlock: hex(r.to) }, ...rest]));
}

/**
 * The logs of a successful eth_getLogs answer as the text between its result's brackets ('' for
 * none), byte for byte as the node wrote them; null when the result is not a list.
 */
export function logsTextOf(body: string | Buffer): string | null {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  try {
    const span = objectMembers(text, documentStart(text)).get('result');
    if (span === undefined || text.charCodeAt(span[0]) !== 0x5b || text.charCodeAt(span[1] - 1) !== 0x5d) return null;
    return text.slice(span[0] + 1, span[1] - 1).trim();
  } catch {
    return null;
  }
}

/** One answer to `idText` holding every sub-range's logs, in order. */
export function mergedLogsAnswer(idText: string, logTexts: readonly string[]): string {
  return answerWithResult(idText, `[${logTexts.filter((t) => t !== '').join(',')}]`);
}

/** A sub-call's answer that is not a list of logs: the caller's answer as it is (a node's error, a failure of the gateway's). */
const failed = (a: Answer): boolean => a.status !== 200 || a.usage[0]?.rpcErrorCode !== null;

/** The caller's one usage draft for a merged answer (or one refused for size): the sub-calls' way, the slowest node's time. */
function mergedUsage(method: string, answers: readonly Answer[], code: number | null, message: string | null, charged: boolean): UsageDraft {
  const d = draft(method, code, message);
  d.charged = charged;
  const uses = answers.map((a) => a.usage[0]?.cache ?? 'miss');
  const first: CacheUse = uses[0] ?? 'miss';
  d.cache = uses.every((u) => u === first) ? first : 'miss';
  for (const a of answers) {
    const u = a.usage[0];
    if (u === undefined || u.upstreamMs === null) continue;
    if (d.upstreamMs === null || u.upstreamMs > d.upstreamMs) {
      d.upstreamMs = u.upstreamMs;
      d.upstream = u.upstream;
    }
  }
  return d;
}

/** The caller's time for a split call: when it is up (performance.now(), ms), and the chain's callTimeoutMs it came from. */
export interface SplitTime {
  deadline: number;
  callTimeoutMs: number;
}

/**
 * Reads `m`'s sub-calls (params `subParams`, from logsSubParams) with `readSub`, at most
 * SUB_CALLS_AT_ONCE at a time, and answers `m` once: every log in block order, or the first
 * sub-call's answer that is not a list of logs (a node's error at its status, the gateway's
 * 502/504, metered as such), or a 502 (-32010, charged, as a node's answer over the cap) when
 * the logs come to more than `maxBytes`, or a 504 (-32015, charged, as a node's timeout) once
 * `time` is up with sub-calls still out (each sub-call's node attempts are held to it too; a
 * sub-call sharing another caller's call in flight might not be). No partial result: on a
 * failure no more sub-calls start.
 */
export function readSplitLogs(
  m: RpcCall,
  subParams: readonly string[],
  admission: Admission,
  readSub: (sub: RpcCall) => MaybePromise<Answer>,
  maxBytes: number,
  time?: SplitTime,
): Promise<Answer> {
  const idText = m.idText ?? 'null';
  return new Promise<Answer>((resolve, reject) => {
    const logTexts: string[] = new Array<string>(subParams.length).fill('');
    const answered: Answer[] = [];
    // The merged answer's bytes so far: without logs, then each sub-range's logs and the comma between two.
    let bytes = Buffer.byteLength(mergedLogsAnswer(idText, []));
    let withLogs = 0;
    let next = 0;
    let finished = false;
    let timer: NodeJS.Timeout | null = null;
    const finish = (answer: Answer): void => {
      finished = true;
      if (timer !== null) clearTimeout(timer);
      resolve(answer);
    };
    const fail = (err: unknown): void => {
      if (finished) return;
      finished = true;
      if (timer !== null) clearTimeout(timer);
      reject(err);
    };
    const error = (status: number, code: number, message: string, charged: boolean): Answer => {
      const usage = [mergedUsage(m.method, answered, code, message, charged)];
      return { status, body: rpcError(idText, code, message), contentType: JSON_CONTENT_TYPE, admission, usage };
    };
    /** The caller's answer once sub-call `i` answered `answer`; null: more to come. */
    const take = (i: number, answer: Answer): Answer | null => {
      if (failed(answer)) return answer;
      const logs = logsTextOf(answer.body ?? '');
      if (logs === null) {
        // Not an answer to eth_getLogs: the node's garbage, a call the gateway could not serve.
        const message = `upstream ${answer.usage[0]?.upstream ?? '(cache)'} sent an invalid answer to eth_getLogs (its result is not a list)`;
        return error(502, RpcCode.upstreamUnavailable, message, false);
      }
      answered.push(answer);
      logTexts[i] = logs;
      if (logs !== '') bytes += Buffer.byteLength(logs) + (withLogs++ > 0 ? 1 : 0);
      if (bytes > maxBytes) {
        return error(502, RpcCode.upstreamUnavailable, answerTooLargeMessage(maxBytes), true);
      }
      if (answered.length < subParams.length) return null;
      const usage = [mergedUsage(m.method, answered, null, null, true)];
      return { status: 200, body: mergedLogsAnswer(idText, logTexts), contentType: JSON_CONTENT_TYPE, admission, usage };
    };
    const settle = (i: number, answer: Answer): void => {
      if (finished) return;
      const done = take(i, answer);
      if (done !== null) finish(done);
      else if (next < subParams.length) launch();
    };
    const launch = (): void => {
      const i = next++;
      let pending: MaybePromise<Answer>;
      try {
        pending = readSub({ ...m, paramsText: subParams[i] });
      } catch (err) {
        fail(err);
        return;
      }
      if (pending instanceof Promise) pending.then((a) => settle(i, a), fail);
      else settle(i, pending);
    };
    if (time !== undefined) {
      const outOfTime = (): void => {
        if (finished) return;
        const message = `the eth_getLogs sub-ranges were not all answered within ${time.callTimeoutMs} ms, the call's time: ask for a narrower block range`;
        finish(error(504, RpcCode.upstreamTimeout, message, true));
      };
      // Judged after the poll phase, as every deadline (src/infra/deadline.ts): a sub-call answered in time settles first.
      timer = setTimeout(() => setImmediate(outOfTime), Math.max(0, time.deadline - performance.now()));
    }
    for (let k = 0; k < SUB_CALLS_AT_ONCE && next < subParams.length && !finished; k++) launch();
  });
}
