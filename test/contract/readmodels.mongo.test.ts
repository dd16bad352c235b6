import { randomUUID } from 'node:crypto';
import { MongoClient } from 'mongodb';
import { afterAll, describe, expect, it } from 'vitest';
import { MongoReadModelStore } from '../../src/infra/readmodels/mongo.js';
import { readModelStoreContract } from './readmodels.contract.js';

const url = process.env.MONGODB_URL;
/** A database of its own for this run, dropped at the end. */
const dbName = `readmodels_contract_${randomUUID().slice(0, 8)}`;

const describeWithMongo = url ? describe : describe.skip;

describeWithMongo(url ? 'MongoReadModelStore' : 'MongoReadModelStore (skipped: set MONGODB_URL to run against a real MongoDB)', () => {
  afterAll(async () => {
    const client = new MongoClient(url!);
    try {
      await client.connect();
      await client.db(dbName).dropDatabase();
    } finally {
      await client.close();
    }
  });

  describe('with transactions when the server has them', () => {
    readModelStoreContract(() => MongoReadModelStore.open(url!, { dbName }));
  });

  describe('expiry (TTL)', () => {
    for (const transactions of ['auto', 'never'] as const) {
      it(`stores each write's expiry as a BSON Date under a TTL index, the furthest kept, unseen by reads (transactions: ${transactions})`, async () => {
        const store = await MongoReadModelStore.open(url!, { dbName, transactions });
        const client = new MongoClient(url!);
        try {
          await client.connect();
          expect(store.expires).toBe(true);
          const collection = `ttl_${randomUUID().slice(0, 8)}`;
          const projection = `p_${randomUUID().slice(0, 8)}`;
          const [early, late] = [Date.parse('2031-01-01T00:00:00Z'), Date.parse('2031-02-01T00:00:00Z')];
          await store.commit(projection, '00000000000000000001', [
            { op: 'inc', collection, key: 'counted', inc: { n: 1 }, expiresAt: late },
            { op: 'put', collection, key: 'row', doc: { v: 1 }, expiresAt: early },
            { op: 'put', collection, key: 'forever', doc: { v: 2 } },
          ]);
          // A later write with an earlier expiry does not bring it forward.
          await store.commit(projection, '00000000000000000002', [{ op: 'inc', collection, key: 'counted', inc: { n: 1 }, expiresAt: early }]);

          const raw = client.db(dbName).collection<{ _id: string; _expiresAt?: Date }>(`rm_${collection}`);
          const docs = new Map((await raw.find().toArray()).map((d) => [d._id, d._expiresAt]));
          expect(docs.get('counted')).toBeInstanceOf(Date);
          expect(docs.get('counted')?.getTime()).toBe(late);
          expect(docs.get('row')?.getTime()).toBe(early);
          expect(docs.get('forever')).toBeUndefined();
          const indexes = await raw.indexes();
          expect(indexes).toContainEqual(expect.objectContaining({ key: { _expiresAt: 1 }, expireAfterSeconds: 0 }));
          expect(await store.get(collection, 'counted')).toEqual({ n: 2 });
          expect(await store.range(collection, { prefix: 'row' })).toEqual([{ key: 'row', doc: { v: 1 } }]);

          // Dropped by a reset, the index comes back with the next write that has an expiry.
          await store.reset(projection, [collection]);
          await store.write([{ op: 'inc', collection, key: 'again', inc: { n: 1 }, expiresAt: early }]);
          expect(await raw.indexes()).toContainEqual(expect.objectContaining({ key: { _expiresAt: 1 }, expireAfterSeconds: 0 }));
        } finally {
          await client.close();
          await store.close();
        }
      });
    }

    it('the TTL monitor removes a document whose expiry has passed', async () => {
      const store = await MongoReadModelStore.open(url!, { dbName });
      try {
        const collection = `ttl_${randomUUID().slice(0, 8)}`;
        await store.write([
          { op: 'put', collection, key: 'gone', doc: { v: 1 }, expiresAt: Date.now() - 1000 },
          { op: 'put', collection, key: 'kept', doc: { v: 2 }, expiresAt: Date.now() + 3_600_000 },
        ]);
        // The monitor runs every 60 s by default.
        const deadline = Date.now() + 150_000;
        while ((await store.get(collection, 'gone')) !== null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1000));
        expect(await store.get(collection, 'gone')).toBeNull();
        expect(await store.get(collection, 'kept')).toEqual({ v: 2 });
      } finally {
        await store.close();
      }
    }, 160_000);
  });

  // The per-document `_pos` guards are what a standalone server gets; run them on any server.
  describe('with per-document guards (no transactions)', () => {
    readModelStoreContract(() => MongoReadModelStore.open(url!, { dbName, transactions: 'never' }));

    it('skips documents already written by a commit that stopped before its checkpoint', async () => {
      const store = await MongoReadModelStore.open(url!, { dbName, transactions: 'never' });
      const client = new MongoClient(url!);
      try {
        await client.connect();
        const collection = `crash_${randomUUID().slice(0, 8)}`;
        const projection = `p_${randomUUID().slice(0, 8)}`;
        const position = '00000000000000000002';
        // As if the commit at `position` wrote `a` and then the process died.
        await client.db(dbName).collection<{ _id: string; n: number; _pos: string }>(`rm_${collection}`).insertOne({ _id: 'a', n: 1, _pos: position });
        await store.commit(projection, position, [
          { op: 'inc', collection, key: 'a', inc: { n: 1 } },
          { op: 'inc', collection, key: 'b', inc: { n: 1 } },
        ]);
        expect(await store.get(collection, 'a')).toEqual({ n: 1 });
        expect(await store.get(collection, 'b')).toEqual({ n: 1 });
        expect(await store.checkpoint(projection)).toBe(position);
      } finally {
        await client.close();
        await store.close();
      }
    });
  });
});
