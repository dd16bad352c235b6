import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, describe, expect, it } from 'vitest';
import { EventStoreError } from '../../src/infra/eventstore/errors.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { startService } from '../support/serviceProcess.js';

/**
 * LevelDB opens a directory whose CURRENT file is gone as a new, empty database and deletes the
 * table files the lost CURRENT named. For the event log that is every event: the store refuses
 * such a directory instead, untouched, and the service stops with one line saying so.
 */

const dirs: string[] = [];
const tempDir = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A log with events in LevelDB table files (compacted), then closed. */
async function logWithEvents(directory: string): Promise<void> {
  const store = await LevelEventStore.open(directory);
  for (let i = 0; i < 50; i++)
    await store.append(`account-${i}`, [{ id: `e-${i}`, type: 'AccountSignedUp', data: { n: i, pad: 'x'.repeat(2000) } }], 'no_stream');
  await store.close();
  // Compaction writes the memtable's events into table files, which a lost CURRENT would orphan.
  const log = new ClassicLevel(join(directory, 'log'));
  await log.open();
  await log.compactRange('\u0000', '\uffff');
  await log.close();
}

const damaged = (error: unknown): boolean => error instanceof EventStoreError && error.code === 'store_damaged';

describe('an event log that lost its CURRENT file', () => {
  it('is refused, its files left as they were; with CURRENT back it opens with every event', async () => {
    const directory = tempDir('gw-damaged-log-');
    await logWithEvents(directory);
    const log = join(directory, 'log');
    const saved = readFileSync(join(log, 'CURRENT'));
    rmSync(join(log, 'CURRENT'));
    const before = readdirSync(log).sort();
    expect(before.some((f) => f.endsWith('.ldb'))).toBe(true);

    const refused = await LevelEventStore.open(directory).then(
      async (store) => {
        await store.close();
        return null;
      },
      (error: unknown) => error,
    );
    expect(damaged(refused), String(refused)).toBe(true);
    expect((refused as Error).message).toMatch(/The event log in \S+ is damaged \(LevelDB files but no CURRENT file\); left untouched/);
    expect(readdirSync(log).sort()).toEqual(before);

    // Nothing was lost by the refusal: with the file restored the log is whole.
    writeFileSync(join(log, 'CURRENT'), saved);
    const store = await LevelEventStore.open(directory);
    try {
      expect(await store.readStream('account-49')).toHaveLength(1);
      expect(await store.readStream('account-0')).toHaveLength(1);
    } finally {
      await store.close();
    }
  });

  it('is refused in a store made with the log and indexes in one directory too', async () => {
    const directory = tempDir('gw-damaged-onestore-');
    const db = new ClassicLevel(directory);
    await db.open();
    await db.batch(Array.from({ length: 200 }, (_, i) => ({ type: 'put' as const, key: `k${i}`, value: 'x'.repeat(1000) })));
    await db.compactRange('\u0000', '\uffff');
    await db.close();
    rmSync(join(directory, 'CURRENT'));
    const before = readdirSync(directory).sort();
    await expect(LevelEventStore.open(directory)).rejects.toSatisfy(damaged);
    expect(readdirSync(directory).sort()).toEqual(before);
    expect(existsSync(join(directory, 'log'))).toBe(false);
  });

  it('stops the service at start with one line and exit 1, the log untouched', { timeout: 60_000 }, async () => {
    const dataDir = tempDir('gw-damaged-service-');
    await logWithEvents(join(dataDir, 'eventstore'));
    const log = join(dataDir, 'eventstore', 'log');
    rmSync(join(log, 'CURRENT'));
    const before = readdirSync(log).sort();
    const service = startService({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off', LOG_LEVEL: 'warn' });
    // Without the refusal it starts on an empty log: stop it rather than wait for it.
    void service.ready.then(
      () => service.child.kill('SIGKILL'),
      () => undefined,
    );
    expect(await service.exited).toBe(1);
    expect(service.output()).toMatch(
      /Could not start: The event log in \S+ is damaged \(LevelDB files but no CURRENT file\); left untouched: restore DATA_DIR from a backup/,
    );
    expect(service.output()).not.toMatch(/\n\s+at /);
    expect(readdirSync(log).sort()).toEqual(before);
  });
});
