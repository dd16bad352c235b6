import { describe, expect, it } from 'vitest';
import { isJsonRpcMediaType } from '../../src/gateway/body.js';
import { extractCredentials } from '../../src/gateway/credentials.js';
import {
  batchUpstreamBody,
  parseJsonRpc,
  type RpcCall,
  restoreId,
  rpcErrorOf,
  singleUpstreamBody,
  splitBatchAnswer,
} from '../../src/gateway/jsonrpc.js';
import { arrayElements, JsonScanError, objectMembers, skipValue, twoMembers } from '../../src/gateway/jsonScan.js';
import { buildParams, restAnswerFromRpc } from '../../src/gateway/rest.js';

/** The pure parts of the protocol layer. */

const parse = (text: string, maxBatch = 100) => parseJsonRpc(Buffer.from(text), maxBatch);
const single = (text: string) => {
  const p = parse(text);
  if (p.kind !== 'single') throw new Error(`expected a single call, got ${p.kind}`);
  return p.member;
};

describe('parseJsonRpc', () => {
  it('keeps id and params as the caller wrote them', () => {
    expect(single('{"jsonrpc":"2.0","id":"a","method":"eth_call","params":[{"to":"0x1"} ,"latest"]}')).toEqual({
      kind: 'call',
      index: 0,
      idText: '"a"',
      idIsFragile: false,
      method: 'eth_call',
      paramsText: '[{"to":"0x1"} ,"latest"]',
    });
    expect(single('{"jsonrpc":"2.0","id":123456789012345678901,"method":"m"}')).toMatchObject({ idText: '123456789012345678901', idIsFragile: true });
    expect(single('{"jsonrpc":"2.0","id":null,"method":"m"}')).toMatchObject({ idText: 'null', idIsFragile: false });
    expect(single('{"jsonrpc":"2.0","method":"m"}')).toMatchObject({ kind: 'call', idText: undefined });
    expect(single('\ufeff {"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}')).toMatchObject({ paramsText: '{"a":1}' });
  });

  it('takes the last of duplicate keys, as JSON.parse does, so a deny list cannot be dodged', () => {
    const m = single('{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","method":"admin_peers"}');
    expect(m).toMatchObject({ method: 'admin_peers' });
    expect(singleUpstreamBody(m as RpcCall)).toBe('{"jsonrpc":"2.0","id":1,"method":"admin_peers"}');
  });

  it.each([
    ['[1]', 'null', -32600],
    ['{"jsonrpc":"2.0","id":{"a":1},"method":"m"}', 'null', -32600],
    ['{"jsonrpc":"2.0","id":true,"method":"m"}', 'null', -32600],
    ['{"jsonrpc":"1.0","id":5,"method":"m"}', '5', -32600],
    ['{"id":5,"method":"m"}', '5', -32600],
    ['{"jsonrpc":"2.0","id":5}', '5', -32600],
    ['{"jsonrpc":"2.0","id":5,"method":""}', '5', -32600],
    [`{"jsonrpc":"2.0","id":5,"method":"${'x'.repeat(201)}"}`, '5', -32600],
    ['{"jsonrpc":"2.0","id":5,"method":"m","params":"x"}', '5', -32602],
    ['{"jsonrpc":"2.0","id":5,"method":"m","params":null}', '5', -32602],
  ])('refuses %s as invalid, echoing id %s', (text, idText, code) => {
    const p = parse(text);
    const member = p.kind === 'single' ? p.member : p.kind === 'batch' ? p.members[0] : null;
    expect(member).toMatchObject({ kind: 'invalid', idText, code });
  });

  it('answers parse errors, non-UTF-8, empty and oversize batches as a whole', () => {
    expect(parse('{"a":')).toMatchObject({ kind: 'error', status: 400, code: -32700 });
    expect(parse('')).toMatchObject({ kind: 'error', status: 400, code: -32700 });
    expect(parseJsonRpc(Buffer.from([0x22, 0xc3, 0x28, 0x22]), 100)).toMatchObject({ kind: 'error', code: -32700, message: expect.stringContaining('UTF-8') });
    expect(parse('[]')).toMatchObject({ kind: 'error', status: 400, code: -32600 });
    expect(parse('[1,2,3]', 2)).toMatchObject({ kind: 'error', status: 413, code: -32600 });
    expect(parse(`${'['.repeat(50_000)}${']'.repeat(50_000)}`)).toMatchObject({ kind: 'batch' });
  });

  it('sends a batch upstream with positions as ids and notifications without', () => {
    const p = parse('[{"jsonrpc":"2.0","id":"x","method":"a"},{"jsonrpc":"2.0","method":"b","params":[1]},{"jsonrpc":"2.0","id":"x","method":"c"}]');
    if (p.kind !== 'batch') throw new Error('batch expected');
    expect(batchUpstreamBody(p.members as RpcCall[])).toBe(
      '[{"jsonrpc":"2.0","id":0,"method":"a"},{"jsonrpc":"2.0","method":"b","params":[1]},{"jsonrpc":"2.0","id":2,"method":"c"}]',
    );
  });
});

describe('upstream answers', () => {
  const calls = (text: string): RpcCall[] => {
    const p = parse(text);
    if (p.kind !== 'batch') throw new Error('batch expected');
    return p.members as RpcCall[];
  };

  it('splits a batch answer by position id and restores the callers ids, results untouched', () => {
    const members = calls('[{"jsonrpc":"2.0","id":"a","method":"m"},{"jsonrpc":"2.0","id":99999999999999999999,"method":"m"}]');
    const answer = Buffer.from('[{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"nope"}}, {"id":0,"jsonrpc":"2.0","result":18446744073709551615}]');
    const split = splitBatchAnswer(answer, members);
    expect(split?.get(0)).toEqual({ text: '{"id":"a","jsonrpc":"2.0","result":18446744073709551615}', error: null });
    expect(split?.get(1)).toEqual({ text: '{"jsonrpc":"2.0","id":99999999999999999999,"error":{"code":-32000,"message":"nope"}}', error: { code: -32000, message: 'nope' } });
  });

  it('applies an error object answering a whole batch to each call, and refuses garbage', () => {
    const members = calls('[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"}]');
    const whole = splitBatchAnswer(Buffer.from('{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}'), members);
    expect([...(whole?.values() ?? [])].map((a) => a.error?.code)).toEqual([-32600, -32600]);
    expect(splitBatchAnswer(Buffer.from('<html>'), members)).toBeNull();
    expect(splitBatchAnswer(Buffer.from('[{"id":0,'), members)).toBeNull();
  });

  it('finds the error of a single answer for metering', () => {
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"result":"0x1"}'))).toBeNull();
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"note":"\\"error\\": inside a string"}}'))).toBeNull();
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"execution reverted","data":"0x"}}'))).toEqual({ code: 3, message: 'execution reverted' });
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}'))).toEqual({ code: -32603, message: 'no code' });
  });

  it('puts a fragile id back into a single answer', () => {
    expect(restoreId(Buffer.from('{"id":1,"jsonrpc":"2.0","result":"0x0"}'), '12345678901234567890').toString()).toBe('{"id":12345678901234567890,"jsonrpc":"2.0","result":"0x0"}');
  });
});

describe('jsonScan', () => {
  it('finds members and elements, strings with escapes included', () => {
    const text = '{"a" : [1, {"b":"x\\"}"}], "c\\u0064": "\\\\", "a": 2}';
    const members = objectMembers(text, 0);
    expect([...members.keys()]).toEqual(['a', 'cd']);
    expect(text.slice(...(members.get('a') as [number, number]))).toBe('2');
    expect(text.slice(...(members.get('cd') as [number, number]))).toBe('"\\\\"');
    expect(arrayElements('[ 1 ,"]", [2,[3]] , {} ]', 0).map(([s, e]) => '[ 1 ,"]", [2,[3]] , {} ]'.slice(s, e))).toEqual(['1', '"]"', '[2,[3]]', '{}']);
  });

  it('finds two members as JSON.parse would: escaped keys, the last duplicate, not a key that only starts alike', () => {
    const text = '{"idx":5,"params":[1],"\\u0069d":"first","method":"m","id" : 7 ,"params\\"":0}';
    const [id, params] = twoMembers(text, 0, 'id', 'params');
    expect(text.slice(...(id as [number, number]))).toBe('7');
    expect(text.slice(...(params as [number, number]))).toBe('[1]');
    expect(JSON.parse(text)).toMatchObject({ id: 7, params: [1] });
    const escapedLast = '{"id":1,"\\u0069d":"two"}';
    expect(escapedLast.slice(...(twoMembers(escapedLast, 0, 'id', 'params')[0] as [number, number]))).toBe('"two"');
    expect(twoMembers('{"jsonrpc":"2.0"}', 0, 'id', 'params')).toEqual([undefined, undefined]);
    expect(twoMembers('{}', 0, 'id', 'params')).toEqual([undefined, undefined]);
    expect(() => twoMembers('{"id":1', 0, 'id', 'params')).toThrow(JsonScanError);
  });

  it('throws on garbage instead of looping', () => {
    for (const bad of ['{"a":1', '{"a" 1}', '[1 2]', '"open', '{a:1}', '[', '{"a":}']) {
      expect(() => (bad.startsWith('[') ? arrayElements(bad, 0) : bad.startsWith('{') ? objectMembers(bad, 0) : skipValue(bad, 0)), bad).toThrow(JsonScanError);
    }
  });
});

describe('REST parameters and answers', () => {
  const params = (args: string[], query: string, body?: string) => {
    const r = buildParams(args, query, body === undefined ? null : Buffer.from(body));
    return r.ok ? r.text : `error: ${r.message}`;
  };

  it('builds params from path, ?params=, other query keys and the body, numbers kept exact', () => {
    expect(params([], '')).toBe('[]');
    expect(params(['pk'], 'commitment=finalized&minContextSlot=18446744073709551615&token=gk_x')).toBe('["pk",{"commitment":"finalized","minContextSlot":18446744073709551615}]');
    expect(params([], `params=${encodeURIComponent('["pk", {"encoding":"base64"}]')}`)).toBe('["pk",{"encoding":"base64"}]');
    expect(params([], '', '{"params":["a",1]}')).toBe('["a",1]');
    expect(params([], '', '["a"]')).toBe('["a"]');
    expect(params(['a'], '', '{"commitment":"confirmed"}')).toBe('["a",{"commitment":"confirmed"}]');
    expect(params([], 'params=notjson')).toMatch(/^error: /);
    expect(params([], 'params=%7B%7D')).toMatch(/must be a JSON array/);
    expect(params([], '', '5')).toMatch(/^error: /);
    expect(params([], '', '{"params":"x"}')).toMatch(/^error: /);
  });

  const outcome = (body: string) => ({ ok: true as const, status: 200, contentType: 'application/json', body: Buffer.from(body), upstreamMs: 1, upstream: 'n' });

  it('names Solana scalar results and keeps everything else as the node wrote it', () => {
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":289012345,"id":1}'), 'blockHeight').body).toBe('{"result":{"blockHeight":289012345}}');
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":{"context":{"slot":1},"value":5},"id":1}'), undefined).body).toBe('{"result":{"context":{"slot":1},"value":5}}');
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":"143498509","id":1}'), undefined).body).toBe('{"result":"143498509"}');
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":1}'), undefined)).toMatchObject({ status: 404, rpcErrorCode: -32601 });
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","error":{"code":-32002,"message":"Transaction simulation failed","data":{"logs":[]}},"id":1}'), undefined)).toMatchObject({
      status: 400,
      body: '{"error":{"code":"rpc_error","message":"Transaction simulation failed","rpcCode":-32002,"data":{"logs":[]}}}',
    });
    expect(restAnswerFromRpc(outcome('<html>'), undefined)).toMatchObject({ status: 502 });
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","id":1}'), undefined)).toMatchObject({ status: 502 });
  });
});

describe('credentials', () => {
  const token = 'gk_abc';
  it.each([
    [['gk_abc'], undefined, '', { token, via: 'path', segments: [] }],
    [['gk_abc', 'wallet', 'getnowblock'], undefined, '', { token, via: 'path', segments: ['wallet', 'getnowblock'] }],
    [['getBlockHeight'], 'Bearer gk_abc', '', { token, via: 'bearer', segments: ['getBlockHeight'] }],
    [[], 'bearer   gk_abc ', '', { token, via: 'bearer', segments: [] }],
    [[], 'Bearer', '', { token: null, via: 'bearer', segments: [] }],
    [['gk_abc'], 'Bearer gk_other', '', { token, via: 'path', segments: [] }],
    [[], `Basic ${Buffer.from(':gk_abc').toString('base64')}`, '', { token, via: 'basic', segments: [] }],
    [[], 'Token gk_abc', '', { token: 'gk_abc', via: 'other', segments: [] }],
    [['getSlot'], undefined, 'api_key=gk_abc', { token, via: 'query', segments: ['getSlot'] }],
    [['legacytoken'], undefined, '', { token: 'legacytoken', via: 'path', segments: [] }],
    [[], undefined, '', { token: null, via: null, segments: [] }],
  ])('%j %s %s', (segments, authorization, query, expected) => {
    expect(extractCredentials(segments, authorization, query)).toEqual(expected);
  });

  it('accepts JSON-ish media types for JSON-RPC and refuses the rest', () => {
    for (const t of [undefined, '', 'application/json', 'Application/JSON; charset=utf-8', 'application/json-rpc', 'text/plain', 'application/vnd.api+json', 'application/x-www-form-urlencoded']) {
      expect(isJsonRpcMediaType(t), String(t)).toBe(true);
    }
    for (const t of ['multipart/form-data; boundary=x', 'application/octet-stream', 'text/xml', 'application/jsonx']) expect(isJsonRpcMediaType(t), t).toBe(false);
  });
});
