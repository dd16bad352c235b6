import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { JournaledUsageSink, UsageJournal } from '../../src/infra/usage/journal.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../../src/infra/usage/memory.js';

const dirs: string[] = [];
const tempDir = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'gw-journal-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const record = (n: number): UsageRecord => ({
  requestId: `req-${n}`,
  at: '2024-05-07T13:45:12.345Z',
  accountId: 'acc_A',
  tokenId: 'tok_T',
  chain: 'eth',
  method: 'eth_call',
  status: 200,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 1.5,
  upstreamMs: 1,
  clientIp: '203.0.113.9',
  upstream: 'eth-1',
  retentionDays: 30,
  charged: true,
});

/** Appends the records in one turn; resolves once the journal said they are written. */
function appendTurn(journal: UsageJournal, records: UsageRecord[]): Promise<void> {
  for (const r of records) journal.append(r);
  return new Promise((resolve) => journal.whenWritten(resolve));
}

const segments = (dir: string): string[] => readdirSync(dir).sort();

describe('the usage journal', () => {
  it('writes a turn’s records before it calls back, and a later start reads them back in order', async () => {
    const dir = tempDir();
    const { journal } = UsageJournal.open({ dir });
    let calledAtOnce = false;
    journal.whenWritten(() => {
      calledAtOnce = true;
    });
    expect(calledAtOnce, 'nothing pending: at once').toBe(true);
    journal.append(record(1));
    journal.append(record(2));
    let written = false;
    journal.whenWritten(() => {
      written = true;
    });
    expect(written, 'not before the end of the turn').toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(written).toBe(true);
    const [segment] = segments(dir);
    expect(readFileSync(join(dir, segment as string), 'utf8').split('\n')).toHaveLength(3);
    // Killed here: nothing closed.
    const { replay } = UsageJournal.open({ dir });
    expect(replay).toEqual({ records: [record(1), record(2)], skipped: 0, segments: 1 });
  });

  it('skips, and counts, a torn last line and lines that are not a record, never a whole one', async () => {
    const dir = tempDir();
    const { journal } = UsageJournal.open({ dir });
    await appendTurn(journal, [record(1), record(2), record(3)]);
    const path = join(dir, segments(dir)[0] as string);
    const bytes = readFileSync(path);
    const lines = bytes.toString('utf8').split('\n');
    // Garbage in the middle (a block of zeros, half a line), a torn write at the end.
    writeFileSync(path, `${lines[0]}\n\0\0\0\0\n${(lines[1] as string).slice(0, 20)}\n{"not":"a record"}\n${lines[2]}\n`);
    appendFileSync(path, (lines[0] as string).slice(0, 30));
    const { replay } = UsageJournal.open({ dir });
    expect(replay.records).toEqual([record(1), record(3)]);
    expect(replay.skipped).toBe(4);

    truncateSync(path, 0);
    expect(UsageJournal.open({ dir }).replay).toEqual({ records: [], skipped: 0, segments: 1 });
  });

  it('deletes a sealed segment once the queue stored every record in it, replayed segments first', async () => {
    const dir = tempDir();
    const first = UsageJournal.open({ dir, segmentBytes: 1 }).journal;
    await appendTurn(first, [record(1), record(2)]);
    await appendTurn(first, [record(3)]);
    expect(segments(dir)).toHaveLength(2);

    // The next start: the two segments hold the journal's first three records.
    const { journal, replay } = UsageJournal.open({ dir, segmentAgeMs: 0 });
    expect(replay.records).toHaveLength(3);
    await appendTurn(journal, [record(4)]);
    journal.sealIfOlder();
    expect(segments(dir)).toHaveLength(3);
    journal.release(1);
    expect(segments(dir), 'the first segment still holds an unstored record').toHaveLength(3);
    journal.release(2);
    expect(segments(dir)).toHaveLength(2);
    journal.release(3);
    expect(segments(dir)).toHaveLength(1);
    journal.release(4);
    expect(segments(dir)).toEqual([]);
  });

  it('in front of the in-process queue: acknowledged records leave the journal, unacknowledged ones stay', async () => {
    const dir = tempDir();
    const backend = new MemoryUsageBackend();
    const queue = new MemoryUsageQueue(backend, 'ingester');
    const { journal } = UsageJournal.open({ dir, segmentAgeMs: 0 });
    const sink = new JournaledUsageSink(journal, queue, async () => backend.appendedThrough());
    for (const n of [1, 2, 3]) sink.enqueue(record(n));
    await new Promise<void>((resolve) => sink.whenHandedOver(resolve));
    const taken = await queue.read(10);
    // The ingester stored the first and the third: the segment must stay for the second.
    await queue.ack([taken[0]?.ackId as string, taken[2]?.ackId as string]);
    await sink.tidy();
    expect(UsageJournal.open({ dir }).replay.records).toEqual([record(1), record(2), record(3)]);
    await queue.ack([taken[1]?.ackId as string]);
    await sink.tidy();
    expect(segments(dir)).toEqual([]);
    await sink.close();
  });
});
