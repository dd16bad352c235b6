import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AggregateStore } from '../../src/commands/aggregateStore.js';
import { apiTokenDecider } from '../../src/domain/apiToken.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';

const at = '2026-11-21T12:00:00.000Z';
const create = {
  type: 'CreateApiToken' as const,
  tokenId: 'tok_1',
  accountId: 'acc_1',
  tokenHash: 'h',
  masked: 'gk_x…y',
  name: 'a',
  description: '',
  expiresAt: null,
  monthlyLimit: null,
  rateLimit: null,
  at,
};

let dir: string;
let store: LevelEventStore;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-agg-'));
  store = await LevelEventStore.open(dir);
});
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('AggregateStore', () => {
  it('sees what another writer appended after its cached state, and decides on it', async () => {
    const mine = new AggregateStore(store);
    const theirs = new AggregateStore(store);
    await mine.run('token-t1', apiTokenDecider, create);
    expect((await mine.load('token-t1', apiTokenDecider)).state).toMatchObject({ name: 'a', status: 'active' });
    await theirs.run('token-t1', apiTokenDecider, { type: 'RenameApiToken', name: 'b', at });
    await theirs.run('token-t1', apiTokenDecider, { type: 'DisableApiToken', at });
    const loaded = await mine.load('token-t1', apiTokenDecider);
    expect(loaded).toMatchObject({ revision: 2, state: { name: 'b', status: 'disabled' } });
    // A command decided on a stale cache would conflict; it retries on the fresh state instead.
    const r = await mine.run('token-t1', apiTokenDecider, { type: 'EnableApiToken', at });
    expect(r.events.map((e) => e.type)).toEqual(['ApiTokenEnabled']);
    expect((await store.readStream('token-t1')).map((e) => e.type)).toEqual(['ApiTokenCreated', 'ApiTokenRenamed', 'ApiTokenDisabled', 'ApiTokenEnabled']);
  });

  it('retries on a conflict: 20 concurrent renames all land, in some order, once each', async () => {
    const writers = Array.from({ length: 4 }, () => new AggregateStore(store));
    await writers[0]?.run('token-t2', apiTokenDecider, { ...create, tokenId: 'tok_2' });
    await Promise.all(Array.from({ length: 20 }, (_, i) => writers[i % 4]?.run('token-t2', apiTokenDecider, { type: 'RenameApiToken', name: `n${i}`, at })));
    const renames = (await store.readStream('token-t2')).filter((e) => e.type === 'ApiTokenRenamed').map((e) => e.data['name']);
    expect(new Set(renames).size).toBe(20);
  });
});
