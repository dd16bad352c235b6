import { describe, expect, it } from 'vitest';
import { timeOrderedId } from '../../src/domain/usage.js';
import { usageBatchEventId } from '../../src/domain/usageBatch.js';

const UUID7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** The 48 bits of milliseconds a UUIDv7 starts with. */
const timeOf = (id: string): number => Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

describe('timeOrderedId (usage event ids)', () => {
  it('is the same for the same time and seed, and differs with the seed', () => {
    const at = Date.parse('2026-11-25T01:02:03.456Z');
    expect(timeOrderedId(at, 'r-1')).toBe(timeOrderedId(at, 'r-1'));
    expect(timeOrderedId(at, 'r-1')).not.toBe(timeOrderedId(at, 'r-2'));
    expect(timeOrderedId(at, 'r-1')).toMatch(UUID7);
  });

  it('starts with the time, so ids sort in time order whatever the seeds', () => {
    const at = Date.parse('2026-11-25T01:02:03.456Z');
    expect(timeOf(timeOrderedId(at, 'x'))).toBe(at);
    for (let i = 0; i < 200; i++) expect(timeOrderedId(at + i, `b-${i}`) < timeOrderedId(at + i + 1, `a-${i}`)).toBe(true);
    // A batch's id leads with its earliest call.
    const calls = [
      { requestId: 'p-2', at: new Date(at + 5).toISOString() },
      { requestId: 'p-1', at: new Date(at).toISOString() },
    ];
    expect(timeOf(usageBatchEventId(calls))).toBe(at);
  });

  it('takes time 0 when the time is not one, and stays deterministic', () => {
    const id = timeOrderedId(Date.parse('yesterday'), 'bad-1');
    expect(id).toMatch(UUID7);
    expect(timeOf(id)).toBe(0);
    expect(timeOrderedId(Number.NaN, 'bad-1')).toBe(id);
  });
});
