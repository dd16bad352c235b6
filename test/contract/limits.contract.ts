import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Limiter, LimitRequest } from '../../src/infra/limits/port.js';

/** The limiter contract: every adapter must pass it. Clocks are injected through `nowMs`. */
export function limiterContract(name: string, open: () => Promise<Limiter>): void {
  describe(`Limiter contract: ${name}`, () => {
    let limiter: Limiter;
    beforeAll(async () => {
      limiter = await open();
    });
    afterAll(() => limiter.close());

    /** A fresh token and bucket per test, so tests never see each other's counts. */
    const fresh = (overrides: Partial<LimitRequest> & { limit?: number | null } = {}): LimitRequest => {
      const id = randomUUID();
      const { limit, ...rest } = overrides;
      return {
        tokenId: `tok${id}`,
        rps: 5,
        monthly: { key: `account:${id}`, limit: limit === undefined ? 1000 : limit },
        cost: 1,
        nowMs: Date.UTC(2025, 4, 10, 12, 0, 0, 100),
        ...rest,
      };
    };

    it('admits a batch partially: the first `granted` calls pass, the rest are refused by the rate', async () => {
      const req = fresh({ cost: 3 });
      const first = await limiter.take(req);
      expect(first).toMatchObject({ granted: 3, refusedBy: null, retryAfterSeconds: null });
      expect(first.rate).toEqual({ limit: 5, remaining: 2, resetAt: req.nowMs / 1000 - 0.1 + 1 });

      const second = await limiter.take({ ...req, nowMs: req.nowMs + 500 });
      expect(second).toMatchObject({ granted: 2, refusedBy: 'rate', retryAfterSeconds: 1 });
      expect(second.rate.remaining).toBe(0);
      expect(second.monthly).toMatchObject({ limit: 1000, remaining: 995 });
    });

    it('counts per one-second window: the next second admits again', async () => {
      const req = fresh({ cost: 5 });
      expect((await limiter.take(req)).granted).toBe(5);
      expect((await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 899 })).granted).toBe(0);
      const next = await limiter.take({ ...req, nowMs: req.nowMs + 900 });
      expect(next.granted).toBe(5);
      expect(next.rate.resetAt).toBe(Math.floor((req.nowMs + 900) / 1000) + 1);
    });

    it('refused calls use no quota', async () => {
      const req = fresh({ rps: 2, cost: 5, limit: 10 });
      expect((await limiter.take(req)).granted).toBe(2);
      const refused = await limiter.take(req);
      expect(refused).toMatchObject({ granted: 0, refusedBy: 'rate' });
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(2);
      expect(refused.monthly.remaining).toBe(8);

      const later = await limiter.take({ ...req, nowMs: req.nowMs + 1000 });
      expect(later.granted).toBe(2);
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(4);
    });

    it('enforces the monthly quota and resets it at the UTC month boundary', async () => {
      const endOfJanuary = Date.UTC(2025, 0, 31, 23, 59, 59, 400);
      const february = Date.UTC(2025, 1, 1) / 1000;
      const req = fresh({ rps: 100, cost: 2, limit: 3, nowMs: endOfJanuary });

      const first = await limiter.take(req);
      expect(first).toMatchObject({ granted: 2, refusedBy: null });
      expect(first.monthly).toEqual({ limit: 3, remaining: 1, resetAt: february });

      const second = await limiter.take(req);
      expect(second).toMatchObject({ granted: 1, refusedBy: 'monthly', retryAfterSeconds: 1 });
      expect(second.monthly.remaining).toBe(0);
      const refused = await limiter.take(req);
      expect(refused).toMatchObject({ granted: 0, refusedBy: 'monthly' });

      const afterMidnight = await limiter.take({ ...req, nowMs: Date.UTC(2025, 1, 1, 0, 0, 0, 50) });
      expect(afterMidnight).toMatchObject({ granted: 2, refusedBy: null });
      expect(afterMidnight.monthly).toEqual({ limit: 3, remaining: 1, resetAt: Date.UTC(2025, 2, 1) / 1000 });
      expect(await limiter.monthlyUsed(req.monthly.key, endOfJanuary)).toBe(3);
      expect(await limiter.monthlyUsed(req.monthly.key, Date.UTC(2025, 1, 15))).toBe(2);
    });

    it('says how long until the month resets when the quota is spent', async () => {
      const midMonth = Date.UTC(2025, 5, 29, 0, 0, 0, 0);
      const req = fresh({ limit: 1, cost: 2, nowMs: midMonth });
      const decision = await limiter.take(req);
      expect(decision).toMatchObject({ granted: 1, refusedBy: 'monthly' });
      expect(decision.retryAfterSeconds).toBe(2 * 24 * 3600);
    });

    it('names the monthly limit when both limits bind', async () => {
      const req = fresh({ rps: 2, limit: 2, cost: 3 });
      expect(await limiter.take(req)).toMatchObject({ granted: 2, refusedBy: 'monthly' });
    });

    it('counts an unlimited (null) monthly quota all the same', async () => {
      const req = fresh({ rps: 50, cost: 7, limit: null });
      const decision = await limiter.take(req);
      expect(decision).toMatchObject({ granted: 7, refusedBy: null });
      expect(decision.monthly.limit).toBeNull();
      expect(decision.monthly.remaining).toBeNull();
      await limiter.take(req);
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(14);
    });

    it('shares the monthly bucket between tokens but keeps rate windows per token', async () => {
      const a = fresh({ rps: 3, cost: 3, limit: 100 });
      const b = { ...a, tokenId: `${a.tokenId}b` };
      expect((await limiter.take(a)).granted).toBe(3);
      expect((await limiter.take(b)).granted).toBe(3);
      expect(await limiter.monthlyUsed(a.monthly.key, a.nowMs)).toBe(6);
    });

    it('never over-admits concurrent calls', async () => {
      const req = fresh({ rps: 10, cost: 1, limit: 1000 });
      const decisions = await Promise.all(Array.from({ length: 40 }, () => limiter.take(req)));
      expect(decisions.reduce((sum, d) => sum + d.granted, 0)).toBe(10);
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(10);
    });

    it('a refund gives units back to the month, never to the rate window', async () => {
      const req = fresh({ rps: 3, cost: 3, limit: 10 });
      expect((await limiter.take(req)).granted).toBe(3);
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 2, nowMs: req.nowMs });
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(1);
      // The second's window keeps the three calls: it protects the nodes while they struggle.
      const sameSecond = await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 300 });
      expect(sameSecond).toMatchObject({ granted: 0, refusedBy: 'rate' });
      expect(sameSecond.monthly.remaining).toBe(9);
      const next = await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 1000 });
      expect(next).toMatchObject({ granted: 1, refusedBy: null });
      expect(next.monthly.remaining).toBe(8);
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(2);
    });

    it('a refund lets a spent month admit again', async () => {
      const req = fresh({ rps: 10, cost: 3, limit: 2 });
      expect(await limiter.take(req)).toMatchObject({ granted: 2, refusedBy: 'monthly' });
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 1, nowMs: req.nowMs });
      const again = await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 10 });
      expect(again).toMatchObject({ granted: 1, refusedBy: null });
      expect(again.monthly.remaining).toBe(0);
      expect(await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 20 })).toMatchObject({ granted: 0, refusedBy: 'monthly' });
    });

    it('a refund never takes a month below 0', async () => {
      const req = fresh({ rps: 10, cost: 2, limit: 10 });
      expect((await limiter.take(req)).granted).toBe(2);
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 5, nowMs: req.nowMs });
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(0);
      const unknown = `account:${randomUUID()}`;
      await limiter.refund({ tokenId: req.tokenId, bucket: unknown, units: 3, nowMs: req.nowMs });
      expect(await limiter.monthlyUsed(unknown, req.nowMs)).toBe(0);
      const next = await limiter.take({ ...req, cost: 1, nowMs: req.nowMs + 1000 });
      expect(next).toMatchObject({ granted: 1, monthly: { remaining: 9 } });
    });

    it("a refund on the account's bucket gives back the token's own month too", async () => {
      const req = fresh({ rps: 10, cost: 4, limit: null });
      const own = `token:${req.tokenId}`;
      expect((await limiter.take(req)).granted).toBe(4);
      expect(await limiter.monthlyUsed(own, req.nowMs)).toBe(4);
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 3, nowMs: req.nowMs });
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(1);
      expect(await limiter.monthlyUsed(own, req.nowMs)).toBe(1);
    });

    it("a refund goes to the month its call was counted in: a call of January's given back in February", async () => {
      const january = Date.UTC(2025, 0, 31, 23, 59, 59, 500);
      const february = Date.UTC(2025, 1, 1, 0, 0, 0, 200);
      const req = fresh({ rps: 10, cost: 2, limit: 10, nowMs: january });
      expect((await limiter.take(req)).granted).toBe(2);
      expect((await limiter.take({ ...req, cost: 1, nowMs: february })).granted).toBe(1);
      await limiter.refund({ tokenId: req.tokenId, bucket: req.monthly.key, units: 2, nowMs: january });
      expect(await limiter.monthlyUsed(req.monthly.key, january)).toBe(0);
      expect(await limiter.monthlyUsed(req.monthly.key, february)).toBe(1);
      expect((await limiter.take({ ...req, cost: 1, nowMs: february + 1000 })).monthly.remaining).toBe(8);
    });

    it('reports zero usage for an unknown bucket', async () => {
      expect(await limiter.monthlyUsed(`account:${randomUUID()}`, Date.now())).toBe(0);
    });
  });
}
