import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { loadChains } from '../../src/gateway/chains.js';

/**
 * The shipped `sol` entry names its methods (`allowedMethods`): a typo is the gateway's refusal,
 * uncharged, not a node's -32601 charged. Every method the installed @solana/web3.js `Connection`
 * can send, over HTTP and over its WebSocket, must be on that list: read out of its bundle here,
 * so an upgrade that adds one fails this test instead of the callers.
 */

const bundle = readFileSync(createRequire(import.meta.url).resolve('@solana/web3.js'), 'utf8');
const names = (pattern: RegExp): string[] => [...new Set([...bundle.matchAll(pattern)].map((m) => m[1] as string))].sort();

/** `this._rpcRequest('getBalance', args)`, and the batches' `{methodName: 'getTransaction', args}`. */
const httpMethods = [...new Set([...names(/\b_rpcRequest\(\s*'([A-Za-z0-9_]+)'/g), ...names(/\bmethodName:\s*'([A-Za-z0-9_]+)'/g)])].sort();
/** `{method: 'accountSubscribe', unsubscribeMethod: 'accountUnsubscribe'}` of its subscriptions. */
const socketMethods = names(/\b(?:method|unsubscribeMethod):\s*'([A-Za-z]+(?:Subscribe|Unsubscribe))'/g);

const sol = loadChains({ env: {} }).get('sol');

describe("the shipped sol chain's allowedMethods", () => {
  it('reads every call of the bundle: each _rpcRequest names its method as a literal', () => {
    // A call whose method were a variable would escape the parse above.
    expect([...bundle.matchAll(/\b_rpcRequest\(/g)].length).toBe([...bundle.matchAll(/\b_rpcRequest\(\s*'[A-Za-z0-9_]+'/g)].length);
    expect(httpMethods.length).toBeGreaterThan(40);
    expect(httpMethods).toEqual(expect.arrayContaining(['getSlot', 'getBalance', 'sendTransaction', 'getConfirmedSignaturesForAddress2']));
    expect(socketMethods).toEqual(expect.arrayContaining(['accountSubscribe', 'accountUnsubscribe', 'signatureSubscribe', 'slotsUpdatesSubscribe']));
  });

  it("is a list (no allow-all), and takes each method @solana/web3.js's Connection sends, over HTTP and the WebSocket", () => {
    expect(sol).toBeDefined();
    const allowed = sol?.isMethodAllowed ?? (() => false);
    expect(allowed('getBalanse'), 'a typo').toBe(false);
    expect(allowed('admin_peers')).toBe(false);
    expect([...httpMethods, ...socketMethods].filter((m) => !allowed(m))).toEqual([]);
  });

  it('takes the REST form of the HTTP ones (GET /sol/<token>/<method>)', () => {
    const restAllowed = sol?.isRestMethodAllowed ?? (() => false);
    expect(httpMethods.filter((m) => !restAllowed(m))).toEqual([]);
    expect(restAllowed('getBalanse')).toBe(false);
  });
});
