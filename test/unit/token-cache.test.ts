import { describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/domain/sha256.js';
import { TokenCache, type TokenLookups } from '../../src/gateway/tokenCache.js';
import type { AccountDoc, TokenDoc } from '../../src/projections/core.js';

const HASH = sha256Hex('the token');
const account: AccountDoc = { id: 'acc_1', email: 'a@example.com', plan: 'developer', createdAt: '2026-11-01T00:00:00.000Z' };
const tokenDoc = (status: TokenDoc['status']): TokenDoc => ({
  id: 'tok_1', accountId: 'acc_1', tokenHash: HASH, masked: 'x…', name: 'main', description: '', status,
  createdAt: '2026-11-01T00:00:00.000Z', expiresAt: null, monthlyLimit: null, rateLimit: 7,
});

/** A read model whose token reads wait until the test answers them, and are counted. */
function heldReads(): { lookups: TokenLookups; reads: () => number; answer: (doc: TokenDoc | null) => void } {
  const waiting: Array<(doc: TokenDoc | null) => void> = [];
  let reads = 0;
  return {
    lookups: {
      tokenDocByHash: () => {
        reads++;
        return new Promise((resolve) => waiting.push(resolve));
      },
      account: async () => account,
    },
    reads: () => reads,
    answer: (doc) => waiting.shift()?.(doc),
  };
}

describe('the token cache', () => {
  it('serves a token it has read from memory, with what the gatekeeper needs of it', async () => {
    const db = heldReads();
    const cache = new TokenCache(db.lookups);
    const first = cache.get(HASH);
    db.answer(tokenDoc('active'));
    expect(await first).toEqual({ tokenId: 'tok_1', accountId: 'acc_1', plan: 'developer', status: 'active', expiresAt: null, monthlyLimit: null, rateLimit: 7 });
    expect(cache.cached(HASH)).toMatchObject({ tokenId: 'tok_1', status: 'active' });
    expect(cache.get(HASH)).toMatchObject({ tokenId: 'tok_1' });
    expect(db.reads()).toBe(1);
  });

  it('caches nothing from a read that an invalidation overtook: a revoke is not undone by a read in flight', async () => {
    const db = heldReads();
    const cache = new TokenCache(db.lookups);
    const inFlight = cache.get(HASH);
    cache.invalidate('token:tok_1'); // the revoke's projection committed while the read was under way
    db.answer(tokenDoc('active')); // ...and the read had seen the document before it
    expect(await inFlight).toMatchObject({ status: 'active' });
    expect(cache.cached(HASH)).toBeUndefined();
    const again = cache.get(HASH);
    db.answer(tokenDoc('revoked'));
    expect(await again).toMatchObject({ status: 'revoked' });
    expect(db.reads()).toBe(2);
  });

  it('does not hold a token created during a read that missed it as unknown', async () => {
    const db = heldReads();
    const cache = new TokenCache(db.lookups);
    const inFlight = cache.get(HASH);
    cache.invalidate('token:tok_1'); // its creation reached the cache
    db.answer(null);
    expect(await inFlight).toBeNull();
    const again = cache.get(HASH);
    expect(again).toBeInstanceOf(Promise);
    db.answer(tokenDoc('active'));
    expect(await again).toMatchObject({ tokenId: 'tok_1' });
  });

  it('holds a miss for a while when nothing changed meanwhile', async () => {
    const db = heldReads();
    const cache = new TokenCache(db.lookups);
    const miss = cache.get(HASH);
    db.answer(null);
    expect(await miss).toBeNull();
    expect(cache.get(HASH)).toBeNull();
    expect(db.reads()).toBe(1);
  });

  it('drops a token on its own invalidation and on its account\'s', async () => {
    const db = heldReads();
    const cache = new TokenCache(db.lookups);
    for (const message of ['token:tok_1', 'account:acc_1']) {
      const read = cache.get(HASH);
      db.answer(tokenDoc('active'));
      await read;
      expect(cache.cached(HASH)).toBeDefined();
      cache.invalidate(message);
      expect(cache.cached(HASH), message).toBeUndefined();
    }
    const read = cache.get(HASH);
    db.answer(tokenDoc('active'));
    await read;
    cache.invalidate('account:acc_other');
    cache.invalidate('token:tok_other');
    expect(cache.cached(HASH)).toBeDefined();
  });
});
