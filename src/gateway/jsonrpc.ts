import { type RequestIds, RpcCode } from './errors.js';
import {
  arrayElements,
  checkedValueEnd,
  documentStart,
  type ElementReader,
  isKey,
  isNumberStart,
  JsonScanError,
  type MemberVisitor,
  objectMembers,
  scanElements,
  scanMembers,
  skipWhitespace,
  stringTokenValue,
} from './jsonScan.js';

/**
 * JSON-RPC 2.0 bodies: parsing and validation (single and batch), the body sent upstream, and
 * reading the upstream's answer. Pure: no I/O. Ids and params are kept as their JSON text so
 * they reach the node and come back exactly as the caller wrote them.
 */

/** A well-formed call. `idText` is the id's JSON text; undefined for a notification. */
export interface RpcCall {
  kind: 'call';
  index: number;
  idText: string | undefined;
  /**
   * An id a node may echo in another spelling (a number beyond 2^53, `1.0`, `-0`, `1e2`; a string
   * with escapes or other than plain characters): sent upstream as a stand-in.
   */
  idIsFragile: boolean;
  method: string;
  paramsText: string | undefined;
}

/** A member the gateway answers itself with -32600 or -32602. */
export interface RpcInvalid {
  kind: 'invalid';
  index: number;
  idText: string;
  code: number;
  message: string;
  method: string | null;
}

export type RpcMember = RpcCall | RpcInvalid;

export type ParsedRpc =
  | { kind: 'error'; status: 400 | 413; code: number; message: string }
  | { kind: 'single'; member: RpcMember }
  | { kind: 'batch'; members: RpcMember[] };

const MAX_METHOD_LENGTH = 200;
/**
 * Ids a node echoes byte for byte even when it parses and re-serialises the call (ganache,
 * Nethermind, Besu): an integer as JSON writes it, or a string of plain characters. ganache
 * answers `1.0` as `1` and `"\u0041"` as `"A"`: judged another call's answer, the node was
 * counted as failed (and ejected after three) and the caller got -32010. Not a negative
 * integer: Agave (Solana's jsonrpc-core) and Sui's jsonrpsee take only an unsigned one and
 * answer `-1` with a parse error, so the call never ran.
 */
const PLAIN_ID = /^(?:0|[1-9][0-9]{0,15}|"[A-Za-z0-9 _.:-]*")$/;
const utf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeUtf8(body: Buffer): string | null {
  try {
    return utf8.decode(body);
  } catch {
    return null;
  }
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const invalidMember = (index: number, idText: string, code: number, message: string, method: string | null = null): RpcInvalid => ({
  kind: 'invalid',
  index,
  idText,
  code,
  message,
  method,
});

/**
 * Where a call object's four JSON-RPC members are (start -1: absent; the last of duplicate keys
 * wins, as in `JSON.parse`), found in the pass that checks the object: no parsed object, no
 * key strings.
 */
class CallMembers {
  jsonrpcStart = -1;
  jsonrpcEnd = -1;
  idStart = -1;
  idEnd = -1;
  methodStart = -1;
  methodEnd = -1;
  paramsStart = -1;
  paramsEnd = -1;
}

const findCallMember: MemberVisitor<CallMembers> = (found, text, keyStart, keyEnd, valueStart, valueEnd) => {
  if (isKey(text, keyStart, keyEnd, 'method')) {
    found.methodStart = valueStart;
    found.methodEnd = valueEnd;
  } else if (isKey(text, keyStart, keyEnd, 'params')) {
    found.paramsStart = valueStart;
    found.paramsEnd = valueEnd;
  } else if (isKey(text, keyStart, keyEnd, 'id')) {
    found.idStart = valueStart;
    found.idEnd = valueEnd;
  } else if (isKey(text, keyStart, keyEnd, 'jsonrpc')) {
    found.jsonrpcStart = valueStart;
    found.jsonrpcEnd = valueEnd;
  }
};

/** The member a call object's parts make, by the spec's rules in order. */
function callFrom(text: string, found: CallMembers, index: number): RpcMember {
  const idFirst = found.idStart < 0 ? -1 : text.charCodeAt(found.idStart);
  const idIsNumber = isNumberStart(idFirst);
  if (idFirst >= 0 && !idIsNumber && idFirst !== 0x22 && !text.startsWith('null', found.idStart)) {
    return invalidMember(index, 'null', RpcCode.invalidRequest, 'Invalid Request: id must be a string, a number or null');
  }
  const idText = found.idStart < 0 ? undefined : text.slice(found.idStart, found.idEnd);
  const echoId = idText ?? 'null';
  // JSON.parse, not a slice: V8 makes a slice of 13 or more characters a view that keeps the
  // whole body alive, and the method outlives the call (metrics keys, buffered usage records).
  const method =
    found.methodStart >= 0 && text.charCodeAt(found.methodStart) === 0x22 ? (JSON.parse(text.slice(found.methodStart, found.methodEnd)) as string) : null;
  const jsonrpc =
    found.jsonrpcStart >= 0 && text.charCodeAt(found.jsonrpcStart) === 0x22 ? stringTokenValue(text.slice(found.jsonrpcStart, found.jsonrpcEnd)) : null;
  if (jsonrpc !== '2.0') return invalidMember(index, echoId, RpcCode.invalidRequest, 'Invalid Request: jsonrpc must be "2.0"', method);
  if (method === null || method === '') return invalidMember(index, echoId, RpcCode.invalidRequest, 'Invalid Request: method must be a non-empty string');
  if (method.length > MAX_METHOD_LENGTH) return invalidMember(index, echoId, RpcCode.invalidRequest, 'Invalid Request: method name too long');
  const paramsFirst = found.paramsStart < 0 ? -1 : text.charCodeAt(found.paramsStart);
  // `"params": null` is no params, as geth and ganache take it (older Go and ethers-rs clients send it): forwarded as [].
  const paramsNull = paramsFirst === 0x6e;
  if (paramsFirst >= 0 && paramsFirst !== 0x7b && paramsFirst !== 0x5b && !paramsNull) {
    return invalidMember(index, echoId, RpcCode.invalidParams, 'Invalid params: params must be an array, an object or null', method);
  }
  return {
    kind: 'call',
    index,
    idText,
    idIsFragile: idText !== undefined && idText !== 'null' && !(PLAIN_ID.test(idText) && (!idIsNumber || Number.isSafeInteger(Number(idText)))),
    method,
    paramsText: paramsFirst < 0 ? undefined : paramsNull ? '[]' : text.slice(found.paramsStart, found.paramsEnd),
  };
}

/** The JSON value at `from`, checked, as a call: the member it makes and the index just past it. */
function readMember(text: string, from: number, index: number): [RpcMember, number] {
  if (text.charCodeAt(from) !== 0x7b) {
    return [invalidMember(index, 'null', RpcCode.invalidRequest, 'Invalid Request: a call must be a JSON object'), checkedValueEnd(text, from)];
  }
  const found = new CallMembers();
  const end = scanMembers(text, from, found, findCallMember, true);
  return [callFrom(text, found, index), end];
}

/** Past `end` only whitespace may follow the document. */
function expectDocumentEnd(text: string, end: number): void {
  if (skipWhitespace(text, end) !== text.length) throw new JsonScanError(`unexpected text at ${end}`);
}

/** A batch read so far: its members, and how many elements it has (members beyond `maxBatch` are only counted). */
class BatchRead {
  readonly members: RpcMember[] = [];
  count = 0;

  constructor(readonly maxBatch: number) {}
}

const readBatchElement: ElementReader<BatchRead> = (batch, text, start) => {
  const index = batch.count++;
  if (index >= batch.maxBatch) return checkedValueEnd(text, start);
  const [member, end] = readMember(text, start, index);
  batch.members.push(member);
  return end;
};

/**
 * A batch's members, checked and read in one pass. Past `maxBatch` members the rest is only
 * checked, so an oversized batch costs no member objects and still gets its parse error first.
 */
function readBatch(text: string, from: number, maxBatch: number): ParsedRpc {
  const batch = new BatchRead(maxBatch);
  expectDocumentEnd(text, scanElements(text, from, batch, readBatchElement));
  if (batch.count === 0) return { kind: 'error', status: 400, code: RpcCode.invalidRequest, message: 'Invalid Request: empty batch' };
  if (batch.count > maxBatch) {
    return {
      kind: 'error',
      status: 413,
      code: RpcCode.invalidRequest,
      message: `Invalid Request: a batch of ${batch.count} calls exceeds the limit of ${maxBatch}`,
    };
  }
  return { kind: 'batch', members: batch.members };
}

/**
 * A request body, checked and read in one pass (what `JSON.parse` accepts, and nothing else, is
 * JSON here), without building the parsed value: ids and params stay as the caller wrote them.
 */
export function parseJsonRpc(body: Buffer, maxBatch: number): ParsedRpc {
  const text = decodeUtf8(body);
  if (text === null) return { kind: 'error', status: 400, code: RpcCode.parseError, message: 'Parse error: body is not valid UTF-8' };
  const start = documentStart(text);
  try {
    if (text.charCodeAt(start) === 0x5b) return readBatch(text, start, maxBatch);
    const [member, end] = readMember(text, start, 0);
    expectDocumentEnd(text, end);
    return { kind: 'single', member };
  } catch (err) {
    if (err instanceof JsonScanError) return { kind: 'error', status: 400, code: RpcCode.parseError, message: 'Parse error: body is not valid JSON' };
    throw err;
  }
}

/**
 * The ids an error about the whole body answers (an unknown chain, a protocol the chain does not
 * speak...): those of its calls, as `parseJsonRpc` reads them; null when the body is not one.
 */
export function requestIdsOf(body: Buffer, maxBatch: number): RequestIds {
  const parsed = parseJsonRpc(body, maxBatch);
  if (parsed.kind === 'error') return null;
  if (parsed.kind === 'single') return { kind: 'single', idText: parsed.member.idText ?? 'null' };
  return { kind: 'batch', idTexts: idTextsOf(parsed.members) };
}

/** The ids of a batch's members that have one (a notification gets no answer). */
export const idTextsOf = (members: readonly RpcMember[]): string[] => members.flatMap((m) => (m.idText === undefined ? [] : [m.idText]));

/** One call as sent upstream, rebuilt from its parts so no smuggled duplicate key survives. */
export function upstreamCallText(call: RpcCall, idText: string | undefined): string {
  const id = idText === undefined ? '' : `"id":${idText},`;
  const params = call.paramsText === undefined ? '' : `,"params":${call.paramsText}`;
  return `{"jsonrpc":"2.0",${id}"method":${JSON.stringify(call.method)}${params}}`;
}

/** A fragile id travels upstream as a stand-in and is put back in the answer. */
export const STAND_IN_ID = '1';

export function singleUpstreamBody(call: RpcCall): string {
  return upstreamCallText(call, call.idIsFragile ? STAND_IN_ID : call.idText);
}

/** Calls of a batch sent upstream with their position as id (callers may repeat ids). */
export function batchUpstreamBody(calls: RpcCall[]): string {
  return `[${calls.map((c) => upstreamCallText(c, c.idText === undefined ? undefined : String(c.index))).join(',')}]`;
}

export interface RpcErrorInfo {
  code: number | null;
  message: string | null;
}

/** Code and message of a JSON-RPC error object given as JSON text. */
export function errorInfoFrom(errorText: string): RpcErrorInfo {
  try {
    const e: unknown = JSON.parse(errorText);
    if (!isPlainObject(e)) return { code: null, message: null };
    return {
      code: typeof e.code === 'number' && Number.isInteger(e.code) ? e.code : RpcCode.internalError,
      message: typeof e.message === 'string' ? e.message.slice(0, 500) : null,
    };
  } catch {
    return { code: RpcCode.internalError, message: null };
  }
}

/**
 * The JSON-RPC error of a single upstream answer, for metering. Cheap for the common case: the
 * bytes are searched for `"error"` natively and only the error member is parsed.
 */
export function rpcErrorOf(body: Buffer): RpcErrorInfo | null {
  if (!body.includes('"error"')) return null;
  const text = body.toString('utf8');
  try {
    const start = documentStart(text);
    if (text.charCodeAt(start) !== 0x7b) return null;
    const span = objectMembers(text, start).get('error');
    if (!span) return null;
    const errorText = text.slice(span[0], span[1]);
    return errorText === 'null' ? null : errorInfoFrom(errorText);
  } catch {
    return null;
  }
}

/** Puts the caller's id back into a single answer sent upstream with a stand-in id. */
export function restoreId(body: Buffer, idText: string): Buffer {
  const text = body.toString('utf8');
  try {
    const start = documentStart(text);
    const span = objectMembers(text, start).get('id');
    if (!span) return body;
    return Buffer.from(text.slice(0, span[0]) + idText + text.slice(span[1]));
  } catch {
    return body;
  }
}

export interface MemberAnswer {
  text: string;
  error: RpcErrorInfo | null;
}

/**
 * Reads an upstream batch answer and returns, per forwarded call index, the answer with the
 * caller's id restored. An object (one error for the whole batch) applies to every call; calls
 * the node left unanswered are missing from the map. null: not a batch answer, or an answer
 * under an id that was not sent (another call's answer: nothing in it is trusted). An empty body
 * answers a batch of only notifications.
 */
export function splitBatchAnswer(body: Buffer, calls: RpcCall[]): Map<number, MemberAnswer> | null {
  const byIndex = new Map(calls.map((c) => [c.index, c]));
  const out = new Map<number, MemberAnswer>();
  const text = body.toString('utf8');
  // Only notifications sent: a JSON-RPC 2.0 node (geth) answers nothing, with an empty body.
  if (skipWhitespace(text, 0) === text.length && calls.every((c) => c.idText === undefined)) return out;
  try {
    const start = documentStart(text);
    if (text.charCodeAt(start) === 0x7b) {
      const errorSpan = objectMembers(text, start).get('error');
      if (!errorSpan) return null;
      const errorText = text.slice(errorSpan[0], errorSpan[1]);
      const error = errorInfoFrom(errorText);
      for (const c of calls) {
        if (c.idText !== undefined) out.set(c.index, { text: `{"jsonrpc":"2.0","id":${c.idText},"error":${errorText}}`, error });
      }
      return out;
    }
    for (const [elStart, elEnd] of arrayElements(text, start)) {
      if (text.charCodeAt(elStart) !== 0x7b) continue;
      const members = objectMembers(text, elStart);
      const idSpan = members.get('id');
      const idText = idSpan ? text.slice(idSpan[0], idSpan[1]) : 'null';
      // No id (or null): the node could not tell which call it answers; the call stays unanswered.
      if (!idSpan || idText === 'null') continue;
      const call = byIndex.get(Number(idText));
      // An id not sent, or sent once and answered twice: not an answer to these calls.
      if (!call || call.idText === undefined || out.has(call.index) || idText !== String(call.index)) return null;
      const errorSpan = members.get('error');
      const errorText = errorSpan ? text.slice(errorSpan[0], errorSpan[1]) : 'null';
      out.set(call.index, {
        text: text.slice(elStart, idSpan[0]) + call.idText + text.slice(idSpan[1], elEnd),
        error: errorText === 'null' ? null : errorInfoFrom(errorText),
      });
    }
    return out;
  } catch (err) {
    if (err instanceof JsonScanError || err instanceof SyntaxError) return null;
    throw err;
  }
}
