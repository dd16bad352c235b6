import { describe, expect, it } from 'vitest';
import { canonicalJson, resultOfValue, sharedKey, sharedValue } from '../../src/gateway/cache/sharedCache.js';

/**
 * The shared cache's keys and values (src/gateway/cache/sharedCache.ts): every gateway instance
 * must reach the same key for the same call however its client wrote it, and a different one for
 * any call whose answer may differ.
 */

const block = '0xbc614e';
const address = '0x52908400098527886E0F7030069857D2E4169EE7';

describe('sharedKey', () => {
  it('is the same for the same call written differently: whitespace, member order, hex case, absent params', () => {
    const key = sharedKey('eth', 'eth_getLogs', JSON.stringify([{ fromBlock: block, toBlock: block, address: address.toLowerCase() }]));
    expect(sharedKey('eth', 'eth_getLogs', ` [ { "address": "${address}", "toBlock": "0xBC614E", "fromBlock": "${block}" } ] `)).toBe(key);
    expect(sharedKey('eth', 'eth_chainId', undefined)).toBe(sharedKey('eth', 'eth_chainId', '[]'));
    expect(sharedKey('eth', 'eth_getBlockByNumber', `["${block}",false]`)).toBe(sharedKey('eth', 'eth_getBlockByNumber', `[ "${block}" , false ]`));
  });

  it('differs when the chain, the method or any param differs', () => {
    const base = sharedKey('eth', 'eth_getBlockByNumber', `["${block}",false]`);
    const others = [
      sharedKey('base', 'eth_getBlockByNumber', `["${block}",false]`),
      sharedKey('eth', 'eth_getBlockTransactionCountByNumber', `["${block}",false]`),
      sharedKey('eth', 'eth_getBlockByNumber', `["${block}",true]`),
      sharedKey('eth', 'eth_getBlockByNumber', `["0xbc614f",false]`),
      sharedKey('eth', 'eth_getBlockByNumber', `["${block}"]`),
      // Only hex strings are case-folded: other strings are the client's own.
      sharedKey('eth', 'eth_call', '[{"to":"0x01","data":"0x"},"0x1",{"label":"A"}]'),
      sharedKey('eth', 'eth_call', '[{"to":"0x01","data":"0x"},"0x1",{"label":"a"}]'),
    ];
    expect(new Set([base, ...others]).size).toBe(others.length + 1);
  });

  it('is short, names its chain, and is null for params that are not JSON', () => {
    const key = sharedKey('eth', 'eth_call', JSON.stringify([{ to: address, data: `0x${'ab'.repeat(4096)}` }, block]));
    expect(key).toMatch(/^rc:eth:[A-Za-z0-9_-]{22}$/);
    expect(sharedKey('eth', 'eth_call', '[{"to":')).toBeNull();
  });

  it('is null for a call with a number JSON.parse cannot hold exactly: two such calls would share a key', () => {
    expect(sharedKey('sol', 'getBlock', '[18446744073709551615]')).toBeNull();
    expect(sharedKey('sol', 'getBlock', '[18446744073709551614]')).toBeNull();
    expect(sharedKey('eth', 'eth_feeHistory', '[1e400]')).toBeNull();
    expect(sharedKey('eth', 'eth_feeHistory', '[4,"latest",[25,75]]')).not.toBeNull();
  });
});

describe('canonicalJson', () => {
  it('sorts object members at every depth and drops none but undefined ones', () => {
    expect(canonicalJson({ b: [{ z: 1, a: null }], a: 'x', c: undefined })).toBe('{"a":"x","b":[{"a":null,"z":1}]}');
  });
});

describe('values', () => {
  it('give back their result only under the key they were written for, whole', () => {
    const key = sharedKey('eth', 'eth_chainId', undefined) as string;
    const other = sharedKey('eth', 'net_version', undefined) as string;
    const value = sharedValue(key, '"0x1"');
    expect(resultOfValue(key, value)).toBe('"0x1"');
    expect(resultOfValue(other, value)).toBeNull();
    expect(resultOfValue(key, value.slice(0, -1))).toBeNull();
    expect(resultOfValue(key, `${value}0`)).toBeNull();
    expect(resultOfValue(key, '"0x1"')).toBeNull();
    expect(resultOfValue(key, '')).toBeNull();
  });
});
