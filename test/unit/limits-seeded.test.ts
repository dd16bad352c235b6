import { describe, expect, it } from 'vitest';
import { MemoryLimiter } from '../../src/infra/limits/memory.js';
import type { LimitRequest } from '../../src/infra/limits/port.js';

/** The in-process limiter starting each bucket's month from what it used before the process. */

const NOW = Date.UTC(2026, 10, 15, 12);
/** A call of token `tok` on an account's bucket, or of the token whose own bucket `key` is. */
const request = (key: string, limit: number, nowMs = NOW): LimitRequest => ({
  tokenId: key.startsWith('token:') ? key.slice('token:'.length) : 'tok',
  rps: 1000,
  monthly: { key, limit },
  cost: 1,
  nowMs,
});

describe('a limiter seeded from the usage totals', () => {
  it('starts a bucket from what it used before, reading it once however many calls come at once', async () => {
    const reads: string[] = [];
    const limiter = new MemoryLimiter(async (bucket) => {
      reads.push(bucket);
      await new Promise((r) => setTimeout(r, 10));
      return 4;
    });
    const first = await Promise.all(Array.from({ length: 3 }, () => limiter.take(request('account:a', 6))));
    expect(first.map((d) => d.granted)).toEqual([1, 1, 0]);
    expect(first[2]?.refusedBy).toBe('monthly');
    // The token's own month too: counted under the account's bucket, for a limit set later.
    expect(reads.sort()).toEqual(['account:a', 'token:tok']);
    // Seeded: the next call is decided at once, without a read.
    const next = limiter.take(request('account:a', 6));
    expect(next).not.toBeInstanceOf(Promise);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(6);
  });

  it('reads each bucket and each month apart', async () => {
    const reads: string[] = [];
    const limiter = new MemoryLimiter(async (bucket, nowMs) => {
      reads.push(`${bucket}@${new Date(nowMs).toISOString().slice(0, 7)}`);
      return 0;
    });
    await limiter.take(request('token:t', 5));
    await limiter.take(request('account:a', 5));
    await limiter.take(request('token:t', 5, Date.UTC(2026, 11, 1)));
    expect(reads.sort()).toEqual(['account:a@2026-11', 'token:t@2026-11', 'token:t@2026-12', 'token:tok@2026-11']);
  });

  it('fails the call when the read fails, and reads again on the next one', async () => {
    let failures = 1;
    const limiter = new MemoryLimiter(async () => {
      if (failures-- > 0) throw new Error('read model unavailable');
      return 2;
    });
    await expect(limiter.take(request('account:a', 3))).rejects.toThrow('read model unavailable');
    expect((await limiter.take(request('account:a', 3))).granted).toBe(1);
    expect((await limiter.take(request('account:a', 3))).granted).toBe(0);
  });
});
