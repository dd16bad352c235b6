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
