import { describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/domain/sha256.js';
import { type CachedToken, TokenTable } from '../../src/gateway/tokenTable.js';

const token = (n: number, accountId = `acc_${n % 7}`): CachedToken => ({
  tokenId: `tok_${String(n).padStart(16, '0')}`,
  accountId,
  plan: (['free', 'developer', 'professional', 'unlimited'] as const)[n % 4] as CachedToken['plan'],
  status: n % 5 === 0 ? 'disabled' : 'active',
  expiresAt: n % 3 === 0 ? `2027-01-0${(n % 9) + 1}T00:00:00Z` : null,
  monthlyLimit: n % 2 === 0 ? null : n * 1_000_003,
  rateLimit: n % 4 === 0 ? null : (n % 50) + 1,
});

/** A hash whose first 8 hex digits (the hash index's home slot) are fixed: every such key collides. */
const collidingHash = (n: number): string => `00000000${sha256Hex(String(n)).slice(8)}`;

/** A small deterministic generator (mulberry32), so a failing sequence can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('the token table', () => {
  it('gives back every field of a token as it was set, nulls included, with its expiry', () => {
    const table = new TokenTable();
    for (let n = 0; n < 12; n++) table.set(sha256Hex(`t${n}`), token(n), 100 + n);
    for (let n = 0; n < 12; n++) {
      const entry = table.get(sha256Hex(`t${n}`));
      expect({ ...entry }).toEqual({ ...token(n), until: 100 + n });
    }
    expect(table.size).toBe(12);
  });

  it('finds nothing for a hash it does not hold, or one that is not lowercase SHA-256 hex', () => {
    const table = new TokenTable();
    const hash = sha256Hex('known');
    table.set(hash, token(1), 1);
    expect(table.get(sha256Hex('other'))).toBeUndefined();
    expect(table.get(hash.toUpperCase())).toBeUndefined();
    expect(table.get(hash.slice(1))).toBeUndefined();
    expect(table.get(`${hash.slice(0, 63)}g`)).toBeUndefined();
    // A byte written with a digit that is not hex is no byte: '1g' must not read as 0x0f.
    const endingIn0f = `${hash.slice(0, 62)}0f`;
    table.set(endingIn0f, token(3), 1);
    expect(table.get(`${hash.slice(0, 62)}1g`)).toBeUndefined();
    expect(table.get(`${hash.slice(0, 62)}g0`)).toBeUndefined();
    expect(table.get(endingIn0f)?.tokenId).toBe(token(3).tokenId);
    expect(table.deleteById(token(3).tokenId)).toBe(true);
    expect(() => table.set(hash.toUpperCase(), token(2), 1)).toThrow(/SHA-256/);
    expect(() => table.set('abc', token(2), 1)).toThrow(/SHA-256/);
    expect(() => table.set(sha256Hex('other'), { ...token(2), tokenId: '' }, 1)).toThrow(/without an id/);
    expect(table.size).toBe(1);
  });

  it('replaces what it holds for a hash, and moves a token whose hash changes', () => {
    const table = new TokenTable();
    table.set(sha256Hex('a'), token(1), 1);
    table.set(sha256Hex('a'), { ...token(1), status: 'revoked', rateLimit: 9 }, 2);
    expect(table.get(sha256Hex('a'))).toMatchObject({ status: 'revoked', rateLimit: 9, until: 2 });
    table.set(sha256Hex('a'), token(2), 3);
    expect(table.get(sha256Hex('a'))?.tokenId).toBe(token(2).tokenId);
    expect(table.deleteById(token(1).tokenId)).toBe(false);
    table.set(sha256Hex('b'), token(2), 4);
    expect(table.get(sha256Hex('a'))).toBeUndefined();
    expect(table.get(sha256Hex('b'))?.until).toBe(4);
    expect(table.size).toBe(1);
  });

  it('drops a token by id, and every token of an account', () => {
    const table = new TokenTable();
    for (let n = 0; n < 70; n++) table.set(sha256Hex(`t${n}`), token(n), 1);
    expect(table.deleteById(token(5).tokenId)).toBe(true);
    expect(table.deleteById(token(5).tokenId)).toBe(false);
    expect(table.get(sha256Hex('t5'))).toBeUndefined();
    table.deleteAccount('acc_3');
    for (let n = 0; n < 70; n++) {
      const expected = n !== 5 && n % 7 !== 3;
      expect(table.get(sha256Hex(`t${n}`)) !== undefined, `token ${n}`).toBe(expected);
    }
    expect(table.size).toBe(70 - 1 - 10);
  });

  it('drops the tokens whose expiry is before a time, and only those', () => {
    const table = new TokenTable();
    for (let n = 0; n < 50; n++) table.set(sha256Hex(`t${n}`), token(n), n);
    expect(table.deleteById(token(3).tokenId)).toBe(true);
    expect(table.deleteExpired(20)).toBe(19); // 0..19 but the 3 already gone
    for (let n = 0; n < 50; n++) expect(table.get(sha256Hex(`t${n}`))?.until, `token ${n}`).toBe(n < 20 ? undefined : n);
    expect(table.size).toBe(30);
    table.set(sha256Hex('t7'), token(7), 99); // a freed record reused
    expect(table.get(sha256Hex('t7'))?.until).toBe(99);
    expect(table.deleteExpired(40, 5)).toBe(5); // at most 5 of the 20 below 40
    expect(table.size).toBe(26);
    expect(table.deleteExpired(40)).toBe(15);
  });

  it('keeps every other key of a collision run findable when one in its middle goes', () => {
    const table = new TokenTable();
    for (let n = 0; n < 40; n++) table.set(collidingHash(n), token(n), n);
    for (const n of [0, 17, 39, 18, 1]) expect(table.deleteById(token(n).tokenId)).toBe(true);
    for (let n = 0; n < 40; n++) {
      expect(table.get(collidingHash(n))?.until, `token ${n}`).toBe([0, 17, 39, 18, 1].includes(n) ? undefined : n);
    }
    // The slots freed are reused, and the run stays whole.
    for (const n of [100, 101]) table.set(collidingHash(n), token(n), n);
    expect(table.get(collidingHash(100))?.until).toBe(100);
    expect(table.get(collidingHash(2))?.until).toBe(2);
  });

  it('agrees with a Map through thousands of random adds, replacements and deletions, across growth of pages and indexes', () => {
    const next = random(42);
    const table = new TokenTable();
    const reference = new Map<string, { hash: string; until: number }>();
    const hashOf = (n: number): string => (n % 3 === 0 ? collidingHash(n) : sha256Hex(`r${n}`));
    for (let step = 0; step < 40_000; step++) {
      const n = Math.floor(next() * 12_000);
      const id = token(n).tokenId;
      // Account drops only in the last quarter, once the table has grown past one page.
      const roll = step < 30_000 ? next() * 0.95 : next();
      if (step === 30_000) expect(table.size).toBeGreaterThan(4096);
      if (roll < 0.6) {
        table.set(hashOf(n), token(n), step);
        reference.set(id, { hash: hashOf(n), until: step });
      } else if (roll < 0.95) {
        expect(table.deleteById(id)).toBe(reference.delete(id));
      } else {
        table.deleteAccount(token(n).accountId);
        for (const [other] of reference) if (token(Number(other.slice(4))).accountId === token(n).accountId) reference.delete(other);
      }
    }
    expect(table.size).toBe(reference.size);
    for (let n = 0; n < 12_000; n++) {
      const held = reference.get(token(n).tokenId);
      expect(table.get(hashOf(n))?.until, `token ${n}`).toBe(held?.until);
    }
  });
});
