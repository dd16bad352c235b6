import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LevelReadModelStore, openReadModels, ReadModelError } from '../../src/infra/readmodels/index.js';
import { readModelStoreContract } from './readmodels.contract.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gw-readmodels-'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('LevelReadModelStore', () => {
  readModelStoreContract(() => LevelReadModelStore.open(join(dir, 'contract')));

  it('keeps an updated document to apply the next update without a read, unless its write was final', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'final'));
    try {
      const commit = (position: number, key: string, fields: Record<string, unknown>, final?: boolean) =>
        store.commit('p', String(position).padStart(20, '0'), [{ op: 'merge', collection: 'blocks', key, fields, final }]);
      const readsFor = async (write: () => Promise<void>): Promise<number> => {
        const before = store.stats.documentsRead;
        await write();
        return store.stats.documentsRead - before;
      };
      // A key first met is looked for on disk; after an update it is kept, unless the update was final.
      expect(await readsFor(() => commit(1, 'open', { a: 1 }))).toBe(1);
      expect(await readsFor(() => commit(2, 'open', { b: 2 }))).toBe(0);
      expect(await readsFor(() => commit(3, 'full', { a: 1 }, true))).toBe(1);
      expect(await readsFor(() => commit(4, 'full', { b: 2 }))).toBe(1);
      expect(await store.get('blocks', 'full')).toEqual({ a: 1, b: 2 });
      expect(await store.get('blocks', 'open')).toEqual({ a: 1, b: 2 });
    } finally {
      await store.close();
    }
  });

  it('refuses a collection name that would break the key layout', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'names'));
    try {
      await expect(store.get('bad\x00name', 'k')).rejects.toMatchObject({ code: 'invalid_collection_name' });
      await expect(store.write([{ op: 'put', collection: '', key: 'k', doc: {} }])).rejects.toBeInstanceOf(
        ReadModelError,
      );
    } finally {
      await store.close();
    }
  });
});

describe('LevelReadModelStore opened for a bulk load (a rebuild process)', () => {
  readModelStoreContract(() => LevelReadModelStore.open(join(dir, 'contract-bulk'), { bulkLoad: true }));

  it('leaves documents that a store opened the ordinary way reads back', async () => {
    const location = join(dir, 'bulk-then-ordinary');
    const bulk = await LevelReadModelStore.open(location, { bulkLoad: true });
    // More than the ordinary 4 MB memtable, all of it still in the bulk store's log when it closes.
    const writes = Array.from({ length: 20_000 }, (_, i) => ({ op: 'inc' as const, collection: 'c', key: `k${String(i).padStart(6, '0')}`, inc: { n: i }, set: { pad: 'x'.repeat(300) } }));
    try {
      await bulk.reset('p', ['c']);
      await bulk.commit('p', '00000000000000000001', writes);
    } finally {
      await bulk.close();
    }
    const ordinary = await LevelReadModelStore.open(location);
    try {
      expect(await ordinary.checkpoint('p')).toBe('00000000000000000001');
      const docs = await ordinary.range('c');
      expect(docs).toHaveLength(20_000);
      expect(docs[12_345]).toEqual({ key: 'k012345', doc: { n: 12_345, pad: 'x'.repeat(300) } });
    } finally {
      await ordinary.close();
    }
  });
});

describe('openReadModels', () => {
  it('opens LevelDB under <dataDir>/readmodels when no MongoDB URL is given', async () => {
    const dataDir = join(dir, 'data');
    const store = await openReadModels({ dataDir });
    try {
      await store.commit('p', '00000000000000000001', [{ op: 'inc', collection: 'c', key: 'k', inc: { n: 1 } }]);
      expect(await store.get('c', 'k')).toEqual({ n: 1 });
    } finally {
      await store.close();
    }
    expect(await readdir(dataDir)).toEqual(['readmodels']);
  });
});
