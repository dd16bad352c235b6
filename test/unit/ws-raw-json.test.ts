import { describe, expect, it } from 'vitest';
import { rawResultOf } from '../../src/gateway/ws/rawJson.js';

describe('rawResultOf: a notification result as the node wrote it', () => {
  it('keeps integers beyond 2^53 exact, whatever the member order and spacing', () => {
    const solana =
      '{"jsonrpc":"2.0","method":"accountNotification","params":{"result":{"context":{"slot":5},"value":{"rentEpoch":18446744073709551615}},"subscription":0}}';
    expect(rawResultOf(solana)).toBe('{"context":{"slot":5},"value":{"rentEpoch":18446744073709551615}}');
    const spaced = '{ "params" : { "subscription" : "0x1" ,\n "result" : [ 1 , 18446744073709551615 ] } , "method" : "eth_subscription" }';
    expect(rawResultOf(spaced)).toBe('[ 1 , 18446744073709551615 ]');
  });

  it('skips strings holding brackets, quotes and escapes, and reads escaped member names', () => {
    const tricky = String.raw`{"method":"logsNotification","params":{"x":"}]\"{[","\u0072esult":{"logs":["a \"}\" b","\\"]},"subscription":3}}`;
    expect(JSON.parse(rawResultOf(tricky) as string)).toEqual({ logs: ['a "}" b', '\\'] });
  });

  it('gives a scalar result, and null when there is no params.result', () => {
    expect(rawResultOf('{"params":{"subscription":1,"result":null}}')).toBe('null');
    expect(rawResultOf('{"params":{"subscription":1,"result":-1.5e3}}')).toBe('-1.5e3');
    expect(rawResultOf('{"params":{"subscription":1}}')).toBeNull();
    expect(rawResultOf('{"params":{}}')).toBeNull();
    expect(rawResultOf('{"result":{"params":1}}')).toBeNull();
    expect(rawResultOf('[1]')).toBeNull();
  });
});
