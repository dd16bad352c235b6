import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyFilter } from '../../src/infra/readmodels/keyFilter.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { ReadModelWrite } from '../../src/infra/readmodels/port.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gw-fresh-keys-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const pos = (n: number) => String(n).padStart(20, '0');
const inc = (collection: string, key: string, n = 1): ReadModelWrite => ({ op: 'inc', collection, key, inc: { n } });

describe('KeyFilter', () => {
  it('never forgets a key it was given, and rarely claims one it was not', () => {
    const filter = new KeyFilter(20);
    const keys = Array.from({ length: 50_000 }, (_, i) => `acc_${i % 97}/minute/2024-05-07T13:${String(i % 60).padStart(2, '0')}/tok_${i}/eth/eth_call`);
    for (const key of keys) filter.add(key);
    for (const key of keys) expect(filter.mightHave(key)).toBe(true);
    let falsePositives = 0;
    for (let i = 0; i < 50_000; i++) if (filter.mightHave(`acc_${i % 97}/hour/2024-05-07T13/tok_${i}/eth/eth_call`)) falsePositives++;
    // 2^20 bits, 5 hashes, 50,000 keys: about 0.1 % in theory.
    expect(falsePositives).toBeLessThan(250);
  });

  it('add says whether the key may have been there before', () => {
    const filter = new KeyFilter(16);
    expect(filter.add('a/b')).toBe(false);
    expect(filter.add('a/b')).toBe(true);
    expect(filter.mightHave('a/c')).toBe(false);
  });
});

describe('LevelReadModelStore after a reset', () => {
  it('does not read documents it knows are new, and still adds onto those it wrote, recent or not', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'skip'));
    try {
      await store.commit('p', pos(1), [inc('c', 'old', 5), inc('other', 'kept', 5)]);
      await store.reset('p', ['c']);
      const readsBefore = store.stats.documentsRead;
      // 30,000 new documents: more than the store keeps in memory (two generations of 10,000).
      for (let b = 0; b < 30; b++)
        await store.commit(
          'p',
          pos(2 + b),
          Array.from({ length: 1000 }, (_, i) => inc('c', `k${b * 1000 + i}`)),
        );
      expect(store.stats.documentsRead).toBe(readsBefore);
      expect(store.stats.readsSkipped).toBeGreaterThanOrEqual(30_000);
      // The first ones have left the memory: they are read back, not taken as new.
      await store.commit('p', pos(40), [inc('c', 'k0', 2), inc('c', 'k29999', 2), inc('c', 'old', 1), inc('other', 'kept', 1)]);
      expect(store.stats.documentsRead).toBeGreaterThan(readsBefore);
      expect(await store.get('c', 'k0')).toEqual({ n: 3 });
      expect(await store.get('c', 'k29999')).toEqual({ n: 3 });
      // Emptied by the reset: counting starts again. Not reset: counting goes on.
      expect(await store.get('c', 'old')).toEqual({ n: 1 });
      expect(await store.get('other', 'kept')).toEqual({ n: 6 });
    } finally {
      await store.close();
    }
  });

  it('reads every document again once reopened (it no longer knows what was written)', async () => {
    const location = join(dir, 'reopen');
    let store = await LevelReadModelStore.open(location);
    await store.reset('p', ['c']);
    await store.commit('p', pos(1), [inc('c', 'a'), { op: 'put', collection: 'c', key: 'b', doc: { n: 10 } }]);
    await store.close();
    store = await LevelReadModelStore.open(location);
    try {
      await store.commit('p', pos(2), [inc('c', 'a'), inc('c', 'b'), inc('c', 'new')]);
      expect(store.stats.documentsRead).toBe(3);
      expect(await store.get('c', 'a')).toEqual({ n: 2 });
      expect(await store.get('c', 'b')).toEqual({ n: 11 });
      expect(await store.get('c', 'new')).toEqual({ n: 1 });
    } finally {
      await store.close();
    }
  });

  it('takes a document put after the reset as existing', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'put'));
    try {
      await store.reset('p', ['c']);
      await store.write(Array.from({ length: 25_000 }, (_, i) => ({ op: 'put' as const, collection: 'c', key: `p${i}`, doc: { n: 100 } })));
      await store.commit('p', pos(1), [inc('c', 'p0')]);
      expect(await store.get('c', 'p0')).toEqual({ n: 101 });
    } finally {
      await store.close();
    }
  });
});
