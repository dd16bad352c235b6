import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EMBEDDED_OWN_STORE,
  embeddedReadModelsDir,
  embeddedRowsDir,
  LevelReadModelStore,
  openEmbeddedReader,
  openReadModels,
  ReadModelError,
} from '../../src/infra/readmodels/index.js';
import { SplitReadModelStore } from '../../src/infra/readmodels/split.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
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

  it('keeps an updated document to apply the next update without a read; a put replaces it', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'recent'));
    try {
      const commit = (position: number, key: string, fields: Record<string, unknown>) =>
        store.commit('p', String(position).padStart(20, '0'), [{ op: 'merge', collection: 'blocks', key, fields }]);
      const readsFor = async (write: () => Promise<void>): Promise<number> => {
        const before = store.stats.documentsRead;
        await write();
        return store.stats.documentsRead - before;
      };
      // A key first met is looked for on disk; after an update it is kept.
      expect(await readsFor(() => commit(1, 'open', { a: 1 }))).toBe(1);
      expect(await readsFor(() => commit(2, 'open', { b: 2 }))).toBe(0);
      expect(await store.get('blocks', 'open')).toEqual({ a: 1, b: 2 });
      // A put is no update: the next update reads what the put wrote.
      await store.commit('p', String(3).padStart(20, '0'), [{ op: 'put', collection: 'blocks', key: 'open', doc: { c: 3 } }]);
      expect(await readsFor(() => commit(4, 'open', { d: 4 }))).toBe(1);
      expect(await store.get('blocks', 'open')).toEqual({ c: 3, d: 4 });
    } finally {
      await store.close();
    }
  });

  it('refuses a collection name that would break the key layout', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'names'));
    try {
      await expect(store.get('bad\x00name', 'k')).rejects.toMatchObject({ code: 'invalid_collection_name' });
      await expect(store.write([{ op: 'put', collection: '', key: 'k', doc: {} }])).rejects.toBeInstanceOf(ReadModelError);
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
    const writes = Array.from({ length: 20_000 }, (_, i) => ({
      op: 'inc' as const,
      collection: 'c',
      key: `k${String(i).padStart(6, '0')}`,
      inc: { n: i },
      set: { pad: 'x'.repeat(300) },
    }));
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

describe('read models split over two LevelDB stores', () => {
  // put, merge and delete: the writes a collection of the second store may take.
  readModelStoreContract(async () =>
    SplitReadModelStore.open(
      await LevelReadModelStore.open(join(dir, 'split-main')),
      await LevelReadModelStore.open(join(dir, 'split-rows')),
      (collection) => /^(put|merge|delete)_/.test(collection),
      [],
    ),
  );
});

describe('openReadModels', () => {
  const pos = (n: number): string => String(n).padStart(20, '0');
  const rows = USAGE_METRICS.requestBlocks;

  /** The keys of a LevelDB directory, as written. */
  async function keysIn(location: string): Promise<string[]> {
    const db = new ClassicLevel<string, string>(location);
    try {
      return await db.keys().all();
    } finally {
      await db.close();
    }
  }

  it('opens LevelDB under <dataDir>/readmodels, with the raw rows under <dataDir>/readmodels-rows, when no MongoDB URL is given', async () => {
    const dataDir = join(dir, 'data');
    const store = await openReadModels({ dataDir });
    try {
      await store.commit('p', pos(1), [
        { op: 'inc', collection: 'c', key: 'k', inc: { n: 1 } },
        { op: 'merge', collection: rows, key: 'acc/2026-11-26T10/0', fields: { 0: ['row'] } },
      ]);
      expect(await store.get('c', 'k')).toEqual({ n: 1 });
      expect(await store.range(rows)).toEqual([{ key: 'acc/2026-11-26T10/0', doc: { 0: ['row'] } }]);
      expect(await store.checkpoint('p')).toBe(pos(1));
    } finally {
      await store.close();
    }
    expect((await readdir(dataDir)).sort()).toEqual(['readmodels', 'readmodels-rows']);
    expect((await keysIn(embeddedReadModelsDir(dataDir))).some((k) => k.includes(rows))).toBe(false);
    expect((await keysIn(embeddedRowsDir(dataDir))).filter((k) => k.includes(rows))).toHaveLength(1);
  });

  it("keeps apart the usage projection's raw rows, by the name it writes them under", () => {
    expect(EMBEDDED_OWN_STORE).toEqual([USAGE_METRICS.requestBlocks]);
  });

  it('moves the raw rows of a store made before into their own store, and reads them there', async () => {
    const dataDir = join(dir, 'data-before');
    const before = await LevelReadModelStore.open(embeddedReadModelsDir(dataDir));
    const blocks = Array.from({ length: 2500 }, (_, i) => ({ key: `acc/2026-11-26T10/${String(i).padStart(16, '0')}`, doc: { 0: [`row ${i}`] } }));
    try {
      await before.commit('usage_metrics', pos(7), [
        ...blocks.map(({ key, doc }) => ({ op: 'put' as const, collection: rows, key, doc })),
        { op: 'inc', collection: 'usage_rollups', key: 'r', inc: { requests: 2500 } },
      ]);
    } finally {
      await before.close();
    }
    const store = await openReadModels({ dataDir });
    try {
      expect(await store.range(rows)).toEqual(blocks);
      expect(await store.get('usage_rollups', 'r')).toEqual({ requests: 2500 });
      expect(await store.checkpoint('usage_metrics')).toBe(pos(7));
    } finally {
      await store.close();
    }
    expect((await keysIn(embeddedReadModelsDir(dataDir))).some((k) => k.includes(rows))).toBe(false);
  });

  /** `store` with its next commit and write failing, as a crash there would leave them undone. */
  function failingOnce(store: LevelReadModelStore): LevelReadModelStore {
    let failNext = true;
    const fail = <T>(go: () => Promise<T>): Promise<T> => {
      if (!failNext) return go();
      failNext = false;
      return Promise.reject(new Error('crash'));
    };
    return Object.assign(Object.create(store) as LevelReadModelStore, {
      commit: (...args: Parameters<LevelReadModelStore['commit']>) => fail(() => store.commit(...args)),
      write: (...args: Parameters<LevelReadModelStore['write']>) => fail(() => store.write(...args)),
    });
  }

  for (const failing of ['main', 'rows'] as const) {
    it(`ends up as if applied once when a commit stopped at the ${failing} store's write, and is replayed`, async () => {
      const location = join(dir, `split-crash-${failing}`);
      const main = await LevelReadModelStore.open(join(location, 'main'));
      const rowsStore = await LevelReadModelStore.open(join(location, 'rows'));
      const store = await SplitReadModelStore.open(
        failing === 'main' ? failingOnce(main) : main,
        failing === 'rows' ? failingOnce(rowsStore) : rowsStore,
        (collection) => collection === rows,
        [rows],
      );
      const writes = (): Parameters<LevelReadModelStore['commit']>[2] => [
        { op: 'merge', collection: rows, key: 'acc/2026-11-26T10/0', fields: { 0: ['a'], 1: ['b'] } },
        { op: 'inc', collection: 'usage_rollups', key: 'r', inc: { requests: 2 } },
      ];
      try {
        await expect(store.commit('usage_metrics', pos(1), writes())).rejects.toThrow('crash');
        // The runner replays the same events at the same position.
        await store.commit('usage_metrics', pos(1), writes());
        expect(await store.get(rows, 'acc/2026-11-26T10/0')).toEqual({ 0: ['a'], 1: ['b'] });
        expect(await store.get('usage_rollups', 'r')).toEqual({ requests: 2 });
        expect(await store.checkpoint('usage_metrics')).toBe(pos(1));
      } finally {
        await store.close();
      }
    });
  }

  it('refuses an inc to the raw rows: applied again after a crash, it would count twice', async () => {
    const store = await openReadModels({ dataDir: join(dir, 'data-inc') });
    try {
      await expect(store.commit('p', pos(1), [{ op: 'inc', collection: rows, key: 'k', inc: { n: 1 } }])).rejects.toMatchObject({ code: 'not_idempotent' });
      expect(await store.checkpoint('p')).toBeNull();
    } finally {
      await store.close();
    }
  });

  it('writes no raw rows for a commit its checkpoint covers already', async () => {
    const store = await openReadModels({ dataDir: join(dir, 'data-covered') });
    try {
      await store.commit('p', pos(5), [{ op: 'merge', collection: rows, key: 'k', fields: { 0: 'first' } }]);
      await store.commit('p', pos(5), [{ op: 'merge', collection: rows, key: 'k', fields: { 0: 'again', 1: 'new' } }]);
      await store.commit('p', pos(3), [{ op: 'delete', collection: rows, key: 'k' }]);
      expect(await store.get(rows, 'k')).toEqual({ 0: 'first' });
    } finally {
      await store.close();
    }
  });

  it("lets another thread's reader see the raw rows and the rest", async () => {
    const dataDir = join(dir, 'data-shared');
    const store = await openReadModels({ dataDir, sharedWithThreads: true });
    const reader = await openEmbeddedReader(dataDir);
    try {
      await store.commit('p', pos(1), [
        { op: 'merge', collection: rows, key: 'k', fields: { 0: 'row' } },
        { op: 'put', collection: 'tokens', key: 't', doc: { name: 'x' } },
      ]);
      expect(await reader.get(rows, 'k')).toEqual({ 0: 'row' });
      expect(await reader.range('tokens')).toEqual([{ key: 't', doc: { name: 'x' } }]);
    } finally {
      await reader.close();
      await store.close();
    }
  });
});
