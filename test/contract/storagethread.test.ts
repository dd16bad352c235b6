import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planCatalog } from '../../src/domain/plans.js';
import { EventStoreError } from '../../src/infra/eventstore/errors.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { openStorageThread, type StorageThread } from '../../src/infra/storagethread/index.js';
import { recordedCalls } from '../support/usageLog.js';
import { category, describeEventStoreContract, newEvent } from './eventstore.contract.js';
import { readModelStoreContract } from './readmodels.contract.js';
import { usageRecord } from './usagequeue.contract.js';

/**
 * The embedded stores as the main thread sees them when they run on the storage thread: the
 * same contracts as the stores themselves, through the port, plus what the thread adds (usage
 * carried over, drained on close, a failed open reported).
 */

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gw-storagethread-'));
  dirs.push(dir);
  return dir;
}
const open = (dataDir: string) => openStorageThread({ dataDir, consumer: 'test', plans: planCatalog() });

let thread: StorageThread;
beforeAll(async () => {
  thread = await open(tempDir());
});
afterAll(async () => {
  await thread?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

// One thread for each suite: its stores close with it, not with the port's `close`.
describeEventStoreContract('the storage thread’s event store', async () => thread.store);
describe('the storage thread’s read models (read-model store contract)', () => {
  readModelStoreContract(async () => thread.readModels);
});

describe('the storage thread', () => {
  it('ingests and projects usage enqueued on this side; draining counts what has not gone over yet', async () => {
    const dataDir = tempDir();
    const first = await open(dataDir);
    const accountId = `acc_${category()}`;
    await first.projector.start();
    first.ingester.start();
    const records = Array.from({ length: 300 }, () => usageRecord({ accountId }));
    for (const r of records.slice(0, 200)) first.usageQueue.enqueue(r);
    await first.ingester.whenDrained(10_000);
    expect(await recordedCalls(first.store, accountId)).toHaveLength(200);
    const head = await first.store.headPosition();
    await first.projector.waitFor(head as string);
    expect(first.projector.isCaughtUp).toBe(true);
    // Still on this side (they go over every few ms) when the drain starts: recorded all the same.
    for (const r of records.slice(200)) first.usageQueue.enqueue(r);
    await first.ingester.whenDrained(10_000);
    await first.close();

    const second = await open(dataDir);
    try {
      const calls = await recordedCalls(second.store, accountId);
      expect(calls.map((c) => c.requestId)).toEqual(records.map((r) => r.requestId));
    } finally {
      await second.close();
    }
  });

  it('reports a crash of the thread once, fails what was in flight and what comes after, and still closes', async () => {
    let worker: Worker | undefined;
    const failures: Error[] = [];
    const crashing = await openStorageThread(
      { dataDir: tempDir(), consumer: 'test', plans: planCatalog(), onFailure: (error) => failures.push(error) },
      (entry, options) => (worker = new Worker(entry, options)),
    );
    const stream = `${category()}-1`;
    await crashing.store.append(stream, [newEvent('Happened')], 'no_stream');
    // In flight when the thread goes: a wait for a position the log will never reach, and a live subscription.
    const waiting = crashing.projector.waitFor('~', 60_000).catch((error: unknown) => error);
    const subscription = crashing.store.subscribeToAll();
    const following = (async () => {
      try {
        for await (const _item of subscription);
        return null;
      } catch (error) {
        return error;
      }
    })();

    // Stopped from outside, as a crash over there would stop it: the process did not ask.
    await worker?.terminate();

    expect(await waiting).toMatchObject({ message: expect.stringMatching(/storage thread stopped/) });
    expect(await following).toMatchObject({ message: expect.stringMatching(/storage thread stopped/) });
    await expect(crashing.store.headPosition()).rejects.toThrow(/storage thread stopped/);
    await expect(crashing.readModels.checkpoint('core')).rejects.toThrow(/storage thread stopped/);
    expect(failures).toHaveLength(1);
    expect(failures[0]?.message).toMatch(/storage thread stopped/);
    // Closing afterwards releases this side (its reader of the shared LevelDB, the port) and reports nothing more.
    await crashing.close();
    expect(failures).toHaveLength(1);
  });

  it('reports a store it cannot open as the store’s own error, and leaves no thread behind', async () => {
    const dataDir = tempDir();
    const held = await LevelEventStore.open(join(dataDir, 'eventstore'));
    try {
      const failed = await open(dataDir).catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(EventStoreError);
      expect(failed).toMatchObject({ code: 'store_locked' });
    } finally {
      await held.close();
    }
    // Nothing kept it open: it opens now.
    const reopened = await open(dataDir);
    await reopened.store.append(`${category()}-1`, [newEvent('Opened')], 'no_stream');
    await reopened.close();
  });
});
