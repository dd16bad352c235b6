import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptCounter, AttemptRule } from '../../src/infra/attempts/port.js';

/** The attempt counter contract: every adapter must pass it. Clocks are injected through `nowMs`. */
export function attemptCounterContract(name: string, open: () => Promise<AttemptCounter>): void {
  describe(`AttemptCounter contract: ${name}`, () => {
    let counter: AttemptCounter;
    beforeAll(async () => {
      counter = await open();
    });
    afterAll(() => counter.close());

    const rule: AttemptRule = { limit: 3, windowMs: 60_000 };
    const start = Date.UTC(2025, 4, 10, 12, 0, 0, 0);
    /** A key of its own per test, so tests never see each other's counts. */
    const fresh = () => `test:${randomUUID()}`;

    it('counts up to the limit, then refuses until the window that opened with the first attempt ends', async () => {
      const key = fresh();
      expect(await counter.take(key, rule, start)).toEqual({ allowed: true });
      expect(await counter.take(key, rule, start + 10_000)).toEqual({ allowed: true });
      expect(await counter.take(key, rule, start + 20_000)).toEqual({ allowed: true });
      expect(await counter.take(key, rule, start + 30_000)).toEqual({ allowed: false, retryAfterMs: 30_000 });
      // A refused attempt is not counted and does not move the end.
      expect(await counter.take(key, rule, start + 59_999)).toEqual({ allowed: false, retryAfterMs: 1 });
      expect(await counter.take(key, rule, start + 60_000)).toEqual({ allowed: true });
    });

    it('keeps each key apart', async () => {
      const a = fresh();
      const b = fresh();
      for (let i = 0; i < 3; i++) await counter.take(a, rule, start);
      expect((await counter.take(a, rule, start)).allowed).toBe(false);
      expect(await counter.take(b, rule, start)).toEqual({ allowed: true });
    });

    it('applies the rule it is given: a longer window, a higher limit', async () => {
      const key = fresh();
      const hourly: AttemptRule = { limit: 5, windowMs: 3_600_000 };
      for (let i = 0; i < 5; i++) expect((await counter.take(key, hourly, start + i)).allowed).toBe(true);
      expect(await counter.take(key, hourly, start + 600_000)).toEqual({ allowed: false, retryAfterMs: 3_000_000 });
    });

    it('gives back an attempt of the current window, never below nothing', async () => {
      const key = fresh();
      for (let i = 0; i < 3; i++) await counter.take(key, rule, start);
      await counter.giveBack(key, start + 1000);
      expect(await counter.take(key, rule, start + 2000)).toEqual({ allowed: true });
      expect((await counter.take(key, rule, start + 3000)).allowed).toBe(false);

      const other = fresh();
      await counter.giveBack(other, start);
      await counter.take(other, rule, start);
      await counter.giveBack(other, start);
      await counter.giveBack(other, start);
      for (let i = 0; i < 3; i++) expect((await counter.take(other, rule, start)).allowed).toBe(true);
      expect((await counter.take(other, rule, start)).allowed).toBe(false);
    });

    it('gives nothing back to a window that has ended', async () => {
      const key = fresh();
      for (let i = 0; i < 3; i++) await counter.take(key, rule, start);
      await counter.giveBack(key, start + 60_000);
      expect((await counter.take(key, rule, start + 59_000)).allowed).toBe(false);
    });

    it('reset ends the window at once', async () => {
      const key = fresh();
      for (let i = 0; i < 3; i++) await counter.take(key, rule, start);
      await counter.reset(key);
      expect(await counter.take(key, rule, start + 1)).toEqual({ allowed: true });
    });

    it('never counts past the limit when attempts arrive together', async () => {
      const key = fresh();
      const verdicts = await Promise.all(Array.from({ length: 10 }, () => counter.take(key, rule, start)));
      expect(verdicts.filter((v) => v.allowed)).toHaveLength(3);
    });
  });
}
