import { describe, expect, it } from 'vitest';
import { isJsonRpcMediaType } from '../../src/gateway/body.js';
import { extractCredentials } from '../../src/gateway/credentials.js';
import { batchUpstreamBody, parseJsonRpc, type RpcCall, restoreId, rpcErrorOf, singleUpstreamBody, splitBatchAnswer } from '../../src/gateway/jsonrpc.js';
import { arrayElements, checkedValueEnd, JsonScanError, objectMembers, skipValue, skipWhitespace } from '../../src/gateway/jsonScan.js';
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
    // `"params": null` is no params (geth and ganache take it), forwarded as [].
    expect(single('{"jsonrpc":"2.0","id":5,"method":"m","params":null}')).toMatchObject({ kind: 'call', paramsText: '[]' });
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
    // Members past the limit are still checked: invalid JSON there is a parse error, not a 413.
    expect(parse('[1,2,{"a":01}]', 2)).toMatchObject({ kind: 'error', status: 400, code: -32700 });
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
    expect(split?.get(1)).toEqual({
      text: '{"jsonrpc":"2.0","id":99999999999999999999,"error":{"code":-32000,"message":"nope"}}',
      error: { code: -32000, message: 'nope' },
    });
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
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"execution reverted","data":"0x"}}'))).toEqual({
      code: 3,
      message: 'execution reverted',
    });
    expect(rpcErrorOf(Buffer.from('{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}'))).toEqual({ code: -32603, message: 'no code' });
  });

  it('puts a fragile id back into a single answer', () => {
    expect(restoreId(Buffer.from('{"id":1,"jsonrpc":"2.0","result":"0x0"}'), '12345678901234567890').toString()).toBe(
      '{"id":12345678901234567890,"jsonrpc":"2.0","result":"0x0"}',
    );
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

  it('reads a call as JSON.parse would: escaped keys, the last duplicate, not a key that only starts alike', () => {
    const text = '{"idx":5,"params":[1],"\\u0069d":"first","method":"m","id" : 7 ,"params\\"":0,"jsonrpc":"2.0"}';
    expect(JSON.parse(text)).toMatchObject({ id: 7, params: [1] });
    expect(single(text)).toMatchObject({ kind: 'call', idText: '7', paramsText: '[1]', method: 'm' });
    expect(single('{"id":1,"\\u0069d":"two","jsonrpc":"2\\u002e0","\\u006dethod":"eth\\u005fcall"}')).toMatchObject({
      kind: 'call',
      idText: '"two"',
      method: 'eth_call',
    });
    expect(single('{"jsonrpc":"2.0","method":"m"}')).toMatchObject({ idText: undefined, paramsText: undefined });
  });

  it('throws on garbage instead of looping', () => {
    for (const bad of ['{"a":1', '{"a" 1}', '[1 2]', '"open', '{a:1}', '[', '{"a":}']) {
      expect(() => (bad.startsWith('[') ? arrayElements(bad, 0) : bad.startsWith('{') ? objectMembers(bad, 0) : skipValue(bad, 0)), bad).toThrow(JsonScanError);
    }
  });
});

/** What JSON.parse says of a text: the oracle the checked scan is held to. */
const parses = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

const checks = (text: string): boolean => {
  try {
    return skipWhitespace(text, checkedValueEnd(text, skipWhitespace(text, 0))) === text.length;
  } catch (err) {
    if (err instanceof JsonScanError) return false;
    throw err;
  }
};

/** A seeded generator (mulberry32), so a failure can be replayed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** JSON-RPC bodies and their near misses: valid documents with a few characters changed, dropped or added. */
function jsonLikeTexts(count: number, seed: number): string[] {
  const random = prng(seed);
  const int = (n: number): number => Math.floor(random() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  const scalars = ['0', '-0', '1.5', '-2e10', '1E+2', '12345678901234567890', '"x"', '"\\u00e9\\n"', '"\\"q\\\\"', 'true', 'false', 'null', '"0x1f"', '""'];
  const value = (depth: number): string => {
    const roll = int(depth > 3 ? 1 : 4);
    if (roll === 0) return pick(scalars);
    if (roll === 1) return `[${Array.from({ length: int(4) }, () => value(depth + 1)).join(',')}]`;
    return `{${Array.from({ length: int(4) }, () => `${pick(['"a"', '"id"', '"params"', '"\\u0069d"', '"method"'])}:${value(depth + 1)}`).join(',')}}`;
  };
  const call = (): string => {
    const members = [`"jsonrpc":${pick(['"2.0"', '"2.0"', '"1.0"', '2', '"2\\u002e0"'])}`, `"method":${pick(['"eth_call"', '"m"', '""', '5', 'null'])}`];
    if (int(4) > 0) members.push(`"id":${pick([...scalars, '{}', '[1]'])}`);
    if (int(4) > 0) members.push(`"params":${value(1)}`);
    if (int(5) === 0) members.push(`"extra":${value(1)}`);
    members.sort(() => random() - 0.5);
    return `{${members.join(pick([',', ' , ', ',\n']))}}`;
  };
  const mutate = (text: string): string => {
    let t = text;
    for (let n = int(3); n >= 0; n--) {
      const at = int(t.length + 1);
      const roll = int(3);
      const ch = pick(['"', '\\', '{', '}', '[', ']', ',', ':', ' ', '-', '.', 'e', '0', '1', 'u', 'n', '\u0001', '\u00e9', '\n']);
      if (roll === 0) t = t.slice(0, at) + ch + t.slice(at);
      else if (roll === 1) t = t.slice(0, at) + t.slice(at + 1);
      else t = t.slice(0, at) + ch + t.slice(at + 1);
    }
    return t;
  };
  return Array.from({ length: count }, () => {
    const doc = int(3) === 0 ? `[${Array.from({ length: 1 + int(3) }, call).join(',')}]` : int(8) === 0 ? value(0) : call();
    return int(2) === 0 ? doc : mutate(doc);
  });
}

describe('checked JSON', () => {
  it.each([
    ['{"a":[1,{"b":null}],"c":"\\u00e9\\t"}', true],
    ['  [ ]  ', true],
    ['-0.5e-7', true],
    ['"\\/"', true],
    ['[[[[[[[[[[[]]]]]]]]]]]', true],
    ['01', false],
    ['1.', false],
    ['.5', false],
    ['-', false],
    ['1e', false],
    ['+1', false],
    ['"\\x"', false],
    ['"\\u12g4"', false],
    ['"tab\there"', false],
    ['[1,]', false],
    ['{"a":1,}', false],
    ['{"a" 1}', false],
    ['{1:1}', false],
    ['[1 2]', false],
    ['tru', false],
    ['nul', false],
    ['NaN', false],
    ['', false],
    ['[', false],
    ['{"a":1}}', false],
  ])('%j is JSON: %s, as JSON.parse says', (text, valid) => {
    expect(parses(text)).toBe(valid);
    expect(checks(text)).toBe(valid);
  });

  it('accepts exactly what JSON.parse accepts, over thousands of near-valid bodies', () => {
    const texts = jsonLikeTexts(20_000, 20261125);
    const disagree = texts.filter((t) => parses(t) !== checks(t));
    expect(disagree).toEqual([]);
    // Both sides are exercised: the fuzz is not all valid or all garbage.
    const valid = texts.filter(parses).length;
    expect(valid).toBeGreaterThan(4_000);
    expect(valid).toBeLessThan(16_000);
  });

  it('takes nesting as deep as a body can hold without overflowing the stack', () => {
    const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`;
    expect(checks(deep)).toBe(true);
    expect(checks(deep.slice(0, -1))).toBe(false);
    expect(checks('[1]')).toBe(true);
  });

  it('reads every body as a JSON.parse-based reading would', () => {
    const reference = (value: unknown): { kind: string; code?: number; method?: unknown; id?: unknown; params?: unknown } => {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return { kind: 'invalid', code: -32600 };
      const v = value as Record<string, unknown>;
      if (Object.hasOwn(v, 'id') && v.id !== null && typeof v.id !== 'string' && typeof v.id !== 'number') return { kind: 'invalid', code: -32600 };
      if (v.jsonrpc !== '2.0' || typeof v.method !== 'string' || v.method === '') return { kind: 'invalid', code: -32600 };
      if (Object.hasOwn(v, 'params') && typeof v.params !== 'object') return { kind: 'invalid', code: -32602, method: v.method };
      // `"params": null` is no params, forwarded as [].
      return { kind: 'call', method: v.method, id: v.id, params: v.params === null ? [] : v.params };
    };
    const read = (m: ReturnType<typeof single>) =>
      m.kind === 'invalid'
        ? { kind: 'invalid', code: m.code, ...(m.code === -32602 ? { method: m.method } : {}) }
        : {
            kind: 'call',
            method: m.method,
            id: m.idText === undefined ? undefined : JSON.parse(m.idText),
            params: m.paramsText === undefined ? undefined : JSON.parse(m.paramsText),
          };
    for (const text of jsonLikeTexts(5_000, 7)) {
      const p = parse(text);
      if (!parses(text)) {
        expect(p, text).toMatchObject({ kind: 'error', code: -32700 });
        continue;
      }
      const value: unknown = JSON.parse(text);
      if (Array.isArray(value)) {
        if (value.length === 0) continue;
        expect(p.kind, text).toBe('batch');
        if (p.kind === 'batch') expect(p.members.map(read), text).toEqual(value.map(reference));
      } else {
        expect(p.kind, text).toBe('single');
        if (p.kind === 'single') expect(read(p.member), text).toEqual(reference(value));
      }
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
    expect(params(['pk'], 'commitment=finalized&minContextSlot=18446744073709551615&token=gk_x')).toBe(
      '["pk",{"commitment":"finalized","minContextSlot":18446744073709551615}]',
    );
    expect(params([], `params=${encodeURIComponent('["pk", {"encoding":"base64"}]')}`)).toBe('["pk",{"encoding":"base64"}]');
    expect(params([], '', '{"params":["a",1]}')).toBe('["a",1]');
    expect(params([], '', '["a"]')).toBe('["a"]');
    expect(params(['a'], '', '{"commitment":"confirmed"}')).toBe('["a",{"commitment":"confirmed"}]');
    expect(params([], 'params=notjson')).toMatch(/^error: /);
    expect(params([], 'params=%7B%7D')).toMatch(/must be a JSON array/);
    expect(params([], '', '5')).toMatch(/^error: /);
    expect(params([], '', '{"params":"x"}')).toMatch(/^error: /);
  });

  const outcome = (body: string) => ({
    ok: true as const,
    status: 200,
    contentType: 'application/json',
    body: Buffer.from(body),
    upstreamMs: 1,
    upstream: 'n',
  });

  it('names Solana scalar results and keeps everything else as the node wrote it', () => {
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":289012345,"id":1}'), 'blockHeight').body).toBe('{"result":{"blockHeight":289012345}}');
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":{"context":{"slot":1},"value":5},"id":1}'), undefined).body).toBe(
      '{"result":{"context":{"slot":1},"value":5}}',
    );
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","result":"143498509","id":1}'), undefined).body).toBe('{"result":"143498509"}');
    expect(restAnswerFromRpc(outcome('{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":1}'), undefined)).toMatchObject({
      status: 404,
      rpcErrorCode: -32601,
    });
    expect(
      restAnswerFromRpc(outcome('{"jsonrpc":"2.0","error":{"code":-32002,"message":"Transaction simulation failed","data":{"logs":[]}},"id":1}'), undefined),
    ).toMatchObject({
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
    for (const t of [
      undefined,
      '',
      'application/json',
      'Application/JSON; charset=utf-8',
      'application/json-rpc',
      'text/plain',
      'application/vnd.api+json',
      'application/x-www-form-urlencoded',
    ]) {
      expect(isJsonRpcMediaType(t), String(t)).toBe(true);
    }
    for (const t of ['multipart/form-data; boundary=x', 'application/octet-stream', 'text/xml', 'application/jsonx'])
      expect(isJsonRpcMediaType(t), t).toBe(false);
  });
});
