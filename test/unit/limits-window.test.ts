import { describe, expect, it } from 'vitest';
import { nextMonthStart } from '../../src/infra/limits/window.js';

describe('nextMonthStart', () => {
  it('is the next UTC month start, in any order of moments (it remembers the last month asked)', () => {
    const moments = [
      ['2026-11-24T04:00:00.000Z', '2026-12-01T00:00:00.000Z'],
      ['2026-11-30T23:59:59.999Z', '2026-12-01T00:00:00.000Z'],
      ['2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
      ['2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z'],
      ['2026-10-31T23:59:59.999Z', '2026-11-01T00:00:00.000Z'],
      ['2028-02-29T12:00:00.000Z', '2028-03-01T00:00:00.000Z'],
      ['2026-12-31T23:59:59.999Z', '2027-01-01T00:00:00.000Z'],
      ['2026-11-15T00:00:00.000Z', '2026-12-01T00:00:00.000Z'],
    ];
    for (const [now, next] of moments) expect(new Date(nextMonthStart(Date.parse(now as string)) * 1000).toISOString(), now).toBe(next);
  });
});
