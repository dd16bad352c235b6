import { describe, expect, it } from 'vitest';
import { EntryBuffer } from '../../src/infra/usage/buffer.js';

/** The usage queue's send buffer: records laid out as stream entries (JSON arrays) as they arrive. */
const record = (i: number, note = ''): string => JSON.stringify([`r-${i}`, note, i]);
const parsed = (buffer: EntryBuffer, maxRecords: number): unknown[][] => buffer.peek(maxRecords).map((e) => JSON.parse(e.body.toString('utf8')) as unknown[]);

describe('EntryBuffer', () => {
  it('lays records out as JSON arrays of at most perEntry records, in order', () => {
    const buffer = new EntryBuffer(1000, 3);
    for (let i = 0; i < 7; i++) buffer.push(record(i));
    expect(buffer.length).toBe(7);
    const entries = parsed(buffer, 100);
    expect(entries.map((e) => e.length)).toEqual([3, 3, 1]);
    expect(entries.flat()).toEqual(Array.from({ length: 7 }, (_, i) => [`r-${i}`, '', i]));
  });

  it('keeps records of any size and any characters, growing an entry as needed', () => {
    const buffer = new EntryBuffer(1000, 100);
    const notes = ['é ☃ 😀 "quoted" \\ \n', 'x'.repeat(100_000), '中文'.repeat(20_000)];
    for (const [i, note] of notes.entries()) buffer.push(record(i, note));
    expect(parsed(buffer, 100)).toEqual([notes.map((note, i) => [`r-${i}`, note, i])]);
  });

  it('sends whole entries up to a number of records, and keeps what was not confirmed', () => {
    const buffer = new EntryBuffer(1000, 2);
    for (let i = 0; i < 6; i++) buffer.push(record(i));
    expect(buffer.peek(4).map((e) => e.count)).toEqual([2, 2]);
    buffer.drop(1); // the first entry confirmed, the second not
    expect(buffer.length).toBe(4);
    expect(
      parsed(buffer, 100)
        .flat()
        .map((r) => (r as unknown[])[0]),
    ).toEqual(['r-2', 'r-3', 'r-4', 'r-5']);
  });

  it('starts a new entry for what arrives after an entry was taken for sending', () => {
    const buffer = new EntryBuffer(1000, 10);
    buffer.push(record(0));
    const [taken] = buffer.peek(100);
    buffer.push(record(1));
    expect(JSON.parse(taken?.body.toString('utf8') ?? '')).toEqual([['r-0', '', 0]]);
    buffer.drop(1);
    expect(parsed(buffer, 100)).toEqual([[['r-1', '', 1]]]);
  });

  it('drops and counts records beyond its capacity', () => {
    const buffer = new EntryBuffer(3, 2);
    for (let i = 0; i < 5; i++) buffer.push(record(i));
    expect(buffer.length).toBe(3);
    expect(buffer.dropped).toBe(2);
    buffer.drop(2);
    expect(buffer.length).toBe(0);
    buffer.push(record(9));
    expect(parsed(buffer, 100)).toEqual([[['r-9', '', 9]]]);
  });
});
