import { describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/domain/sha256.js';
import { TokenCache, type TokenLookups } from '../../src/gateway/tokenCache.js';
import type { AccountDoc, TokenDoc } from '../../src/projections/core.js';

const HASH = sha256Hex('the token');
const account: AccountDoc = { id: 'acc_1', email: 'a@example.com', plan: 'developer', createdAt: '2026-11-01T00:00:00.000Z' };
const tokenDoc = (status: TokenDoc['status']): TokenDoc => ({
  id: 'tok_1',
  accountId: 'acc_1',
  tokenHash: HASH,
  masked: 'x…',
  name: 'main',
  description: '',
  status,
  createdAt: '2026-11-01T00:00:00.000Z',
  expiresAt: null,
  monthlyLimit: null,
  rateLimit: 7,
});

const hashOf = (n: number): string => sha256Hex(`token ${n}`);

/** A read model that answers at once: token n is `tok_<n>`. */
function readModel(tokens = 5): { lookups: TokenLookups; reads: string[] } {
  const reads: string[] = [];
  const byHash = new Map(Array.from({ length: tokens }, (_, n) => [hashOf(n), { ...tokenDoc('active'), id: `tok_${n}`, tokenHash: hashOf(n) }]));
  return {
    lookups: {
      tokenDocByHash: async (hash) => {
        reads.push(hash);
        return byHash.get(hash) ?? null;
      },
      account: async () => account,
    },
    reads,
  };
}

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
    expect(await first).toEqual({
      tokenId: 'tok_1',
      accountId: 'acc_1',
      plan: 'developer',
      status: 'active',
      expiresAt: null,
      monthlyLimit: null,
      rateLimit: 7,
    });
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

  it("drops a token on its own invalidation and on its account's", async () => {
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

  it('drops a token left uncalled for a minute after its entry went stale, at a later miss', async () => {
    let now = 1_000_000;
    const db = readModel();
    const cache = new TokenCache(db.lookups, () => now);
    await cache.get(hashOf(0));
    await cache.get(hashOf(1));
    now += 61_000; // both stale; token 1 is called again and read anew
    await cache.get(hashOf(1));
    expect(cache.size).toBe(2);
    now += 60_000; // token 0 stale for 60 s; token 1 for 0 s
    await cache.get(hashOf(2)); // a miss: sweeps
    expect(cache.size).toBe(2);
    expect(cache.cached(hashOf(1))).toBeUndefined(); // stale, but kept until it has been so for a minute
    await cache.get(hashOf(0));
    expect(db.reads.filter((h) => h === hashOf(0))).toHaveLength(2);
  });

  it('sweeps at most once a minute', async () => {
    const start = 1_000_000;
    let now = start;
    const at = (seconds: number): void => {
      now = start + seconds * 1000;
    };
    const db = readModel();
    const cache = new TokenCache(db.lookups, () => now);
    await cache.get(hashOf(0)); // fresh until 60 s
    at(150);
    await cache.get(hashOf(1)); // a sweep: token 0 stale for 90 s, dropped; token 1 fresh until 210 s
    expect(cache.size).toBe(1);
    at(255);
    await cache.get(hashOf(2)); // a sweep: token 1 stale for 45 s, kept
    expect(cache.size).toBe(2);
    at(285);
    await cache.get(hashOf(3)); // token 1 now stale for 75 s, but the last sweep was 30 s ago
    expect(cache.size).toBe(3);
    at(316);
    await cache.get(hashOf(4)); // a sweep: token 1 goes; 2 (stale for 1 s) and 3 stay
    expect(cache.size).toBe(3);
  });

  it('drops a large cold set a bounded slice at a time, a second apart', async () => {
    const start = 1_000_000;
    let now = start;
    const db = readModel(10_010);
    const cache = new TokenCache(db.lookups, () => now);
    for (let n = 0; n < 10_005; n++) await cache.get(hashOf(n));
    now = start + 130_000;
    await cache.get(hashOf(10_005)); // a sweep, cut short at 10,000
    expect(cache.size).toBe(6);
    now += 500;
    await cache.get(hashOf(10_006)); // within the second: no sweep
    expect(cache.size).toBe(7);
    now += 600;
    await cache.get(hashOf(10_007)); // a second after the cut-short sweep: it goes on
    expect(cache.size).toBe(3);
  });
});
