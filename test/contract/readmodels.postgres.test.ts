import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresReadModelStore } from '../../src/infra/readmodels/postgres.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { readModelStoreContract } from './readmodels.contract.js';

const unavailable = await postgresUnavailable();

describe.skipIf(unavailable !== null)(unavailable ? `PostgresReadModelStore (skipped: ${unavailable})` : 'PostgresReadModelStore', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  readModelStoreContract(() => PostgresReadModelStore.open(db.url));
});

describe.skipIf(unavailable !== null)('PostgresReadModelStore beside other processes', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('loses no increment when several stores (processes) update the same documents at once', async () => {
    const stores = await Promise.all([1, 2, 3].map(() => PostgresReadModelStore.open(db.url, { poolSize: 4 })));
    try {
      await Promise.all(
        stores.flatMap((store, s) =>
          Array.from({ length: 30 }, (_, i) =>
            i % 2 === 0
              ? store.commit(`p${s}`, String(i + 1).padStart(20, '0'), [
                  { op: 'inc', collection: 'shared', key: 'total', inc: { n: 1 } },
                  { op: 'inc', collection: 'shared', key: `by/${i % 3}`, inc: { n: 1 } },
                ])
              : store.write([
                  { op: 'inc', collection: 'shared', key: 'total', inc: { n: 1 } },
                  { op: 'inc', collection: 'shared', key: `by/${i % 3}`, inc: { n: 1 } },
                ]),
          ),
        ),
      );
      expect(await stores[0]!.get('shared', 'total')).toEqual({ n: 90 });
      expect((await stores[1]!.range('shared', { prefix: 'by/' })).map(({ doc }) => doc['n'])).toEqual([30, 30, 30]);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  });

  it("adds numbers as JavaScript does (doubles), so its sums match the embedded store's", async () => {
    const store = await PostgresReadModelStore.open(db.url);
    try {
      await store.write([{ op: 'inc', collection: 'sums', key: 'k', inc: { ms: 0.1 } }]);
      await store.write([{ op: 'inc', collection: 'sums', key: 'k', inc: { ms: 0.2 }, set: { label: 'x' } }]);
      expect(await store.get('sums', 'k')).toEqual({ ms: 0.1 + 0.2, label: 'x' });
    } finally {
      await store.close();
    }
  });
});
