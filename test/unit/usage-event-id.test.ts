import { describe, expect, it } from 'vitest';
import { usageEventId } from '../../src/domain/usage.js';

const UUID7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** The 48 bits of milliseconds a UUIDv7 starts with. */
const timeOf = (id: string): number => Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

describe('usageEventId', () => {
  it('is the same for the same record, and differs with the request id', () => {
    const at = '2026-11-25T01:02:03.456Z';
    expect(usageEventId({ requestId: 'r-1', at })).toBe(usageEventId({ requestId: 'r-1', at }));
    expect(usageEventId({ requestId: 'r-1', at })).not.toBe(usageEventId({ requestId: 'r-2', at }));
    expect(usageEventId({ requestId: 'r-1', at })).toMatch(UUID7);
  });

  it("starts with the call's time, so ids sort in time order whatever the request ids", () => {
    const at = Date.parse('2026-11-25T01:02:03.456Z');
    expect(timeOf(usageEventId({ requestId: 'x', at: new Date(at).toISOString() }))).toBe(at);
    for (let i = 0; i < 200; i++) {
      const earlier = usageEventId({ requestId: `b-${i}`, at: new Date(at + i).toISOString() });
      const later = usageEventId({ requestId: `a-${i}`, at: new Date(at + i + 1).toISOString() });
      expect(earlier < later).toBe(true);
    }
  });

  it("takes time 0 when the record's time is not one, and stays deterministic", () => {
    const id = usageEventId({ requestId: 'bad-1', at: 'yesterday' });
    expect(id).toMatch(UUID7);
    expect(timeOf(id)).toBe(0);
    expect(usageEventId({ requestId: 'bad-1', at: 'yesterday' })).toBe(id);
  });
});
