import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { Projection } from '../../src/projections/projection.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { newEvent } from '../contract/eventstore.contract.js';

/** Counts every event it is given. */
const counting: Projection = {
  name: 'counting',
  collections: ['counts'],
  project: () => [{ op: 'inc', collection: 'counts', key: 'all', inc: { n: 1 } }],
};

const LINGER_MS = 1500;

describe('a live batch of events nobody waits for', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function running() {
    const dir = mkdtempSync(join(tmpdir(), 'gw-lingering-'));
    const store = await LevelEventStore.open(join(dir, 'events'));
    const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
    const runner = new ProjectionRunner(store, readModels, [counting], null, Date.now, { types: new Set(['Metered']), ms: LINGER_MS });
    cleanups.push(async () => {
      await runner.stop();
      await readModels.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await runner.start();
    await runner.caughtUp;
    const count = async (): Promise<unknown> => (await readModels.get('counts', 'all'))?.['n'] ?? 0;
    return { store, runner, count };
  }

  it('gathers more of them for a while before its commit', async () => {
    const { store, runner, count } = await running();
    const appended = await store.append('metered-1', [newEvent('Metered'), newEvent('Metered')], 'no_stream');
    await new Promise((r) => setTimeout(r, 300));
    expect(await count(), 'not committed within 300 ms').toBe(0);
    const started = Date.now();
    await runner.waitFor(appended.position, 5000);
    expect(Date.now() - started).toBeGreaterThan(LINGER_MS - 400);
    expect(await count()).toBe(2);
  });

  it('is committed within a few ms once an event somebody may wait for joins it', async () => {
    const { store, runner, count } = await running();
    await store.append('metered-1', [newEvent('Metered')], 'no_stream');
    await new Promise((r) => setTimeout(r, 50));
    const command = await store.append('account-1', [newEvent('AccountSignedUp')], 'no_stream');
    const started = Date.now();
    await runner.waitFor(command.position, 5000);
    expect(Date.now() - started, 'committed well before the lingering would have ended').toBeLessThan(LINGER_MS / 2);
    expect(await count()).toBe(2);
  });
});
