import { describe, expect, it } from 'vitest';
import { InvalidInput } from '../../src/commands/api/input.js';
import { resolvePeriod } from '../../src/commands/api/metricsRoutes.js';
import { DomainError } from '../../src/domain/errors.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';

const now = new Date('2024-05-20T12:34:56.789Z');
const context = { accountId: 'acc_A', plan: DEFAULT_PLANS.developer, now, chainIds: ['eth', 'sol', 'local'] };
const resolve = (query: Record<string, unknown>) => resolvePeriod(query, context);

describe('metrics period', () => {
  it('defaults to the plan retention window up to now; a day series counts whole hours', () => {
    const r = resolve({});
    // The cutoff is rounded up (never shows data from before it), now is rounded up.
    expect(r.period).toEqual({ start: '2024-04-20T13:00:00.000Z', end: '2024-05-20T13:00:00.000Z' });
    expect(r.granularity).toBe('day');
    expect(r.retention).toEqual({ retentionDays: 30, clamped: false, earliest: '2024-04-20T12:34:00.000Z' });
    expect(r.chain).toBeNull();
  });

  it('clamps a start older than the retention and says so', () => {
    const r = resolvePeriod({ start: '2020-01-01T00:00:00Z' }, { ...context, plan: DEFAULT_PLANS.free });
    expect(r.period.start).toBe('2024-05-13T12:34:00.000Z');
    expect(r.retention).toMatchObject({ retentionDays: 7, clamped: true });
    expect(r.granularity).toBe('hour');
  });

  it('rounds start down and end up to the minute; picks the granularity from the length', () => {
    const r = resolve({ start: '2024-05-20T10:00:30Z', end: '2024-05-20T11:59:01.5+00:00', chain: 'eth' });
    expect(r.period).toEqual({ start: '2024-05-20T10:00:00.000Z', end: '2024-05-20T12:00:00.000Z' });
    expect(r.granularity).toBe('minute');
    expect(r.scope).toMatchObject({ accountId: 'acc_A', chain: 'eth', granularity: 'minute' });
    expect(resolve({ start: '2024-05-10', end: '2024-05-20' }).granularity).toBe('hour');
    expect(resolve({ start: '2024-05-01T10:20:00Z', end: '2024-05-19T10:20:00Z' }).period).toEqual({
      start: '2024-05-01T10:00:00.000Z',
      end: '2024-05-19T11:00:00.000Z',
    });
    expect(resolve({ start: '2024-05-20T14:00:00+02:00' }).period.start).toBe('2024-05-20T12:00:00.000Z');
  });

  it('counts whole hours, at least hourly, for a period starting before the minute roll-ups are kept', () => {
    // Developer keeps 30 days; minute roll-ups are kept 8 (MINUTE_RETENTION_DAYS).
    const old = resolve({ start: '2024-05-05T10:20:30Z', end: '2024-05-05T11:40:00Z' });
    expect(old.period).toEqual({ start: '2024-05-05T10:00:00.000Z', end: '2024-05-05T12:00:00.000Z' });
    expect(old.granularity).toBe('hour');
    expect(resolve({ start: '2024-05-10T10:20:30Z' }).period).toEqual({ start: '2024-05-10T10:00:00.000Z', end: '2024-05-20T13:00:00.000Z' });
    // The last 7 days are still counted to the minute.
    const week = resolve({ start: '2024-05-13T12:34:56Z' });
    expect(week.period).toEqual({ start: '2024-05-13T12:34:00.000Z', end: '2024-05-20T12:35:00.000Z' });
    expect(week.granularity).toBe('hour');
    expect(resolve({ start: '2024-05-13T10:20:30Z', end: '2024-05-13T11:40:00Z' }).granularity).toBe('minute');
  });

  it('gives an empty period when the whole range is past retention', () => {
    const r = resolve({ start: '2023-01-01T00:00:00Z', end: '2023-02-01T00:00:00Z' });
    expect(r.period.start).toBe(r.period.end);
    expect(r.retention.clamped).toBe(true);
  });

  it('refuses malformed timestamps, end before start, far-future ends, unknown chains and unknown parameters', () => {
    const refused = (query: Record<string, unknown>) => {
      try {
        resolve(query);
      } catch (e) {
        return e instanceof InvalidInput ? 'invalid_input' : e instanceof DomainError ? e.code : 'other';
      }
      return 'accepted';
    };
    expect(refused({ start: 'yesterday' })).toBe('invalid_input');
    expect(refused({ end: '2024-13-01T00:00:00Z' })).toBe('invalid_input');
    expect(refused({ start: '2024-05-20T00:00:00' })).toBe('invalid_input');
    expect(refused({ start: ['2024-05-01', '2024-05-02'] })).toBe('invalid_input');
    // The checks the schema cannot make alone fail as a schema mismatch does: the same 400 shape.
    expect(refused({ start: '2024-05-20T10:00:00Z', end: '2024-05-20T09:00:00Z' })).toBe('invalid_input');
    expect(refused({ start: '2024-05-20T10:00:00Z', end: '2024-05-20T10:00:00Z' })).toBe('invalid_input');
    expect(refused({ end: '9999-01-01T00:00:00Z' })).toBe('invalid_input');
    expect(refused({ chain: 'doge' })).toBe('invalid_input');
    expect(refused({ since: '2024-05-01' })).toBe('invalid_input');
    expect(refused({ end: '2024-05-21T00:00:00Z' })).toBe('accepted');
  });
});
