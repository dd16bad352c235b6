import { randomUUID } from 'node:crypto';
import { MongoClient } from 'mongodb';
import { afterAll, describe, expect, it } from 'vitest';
import { MongoReadModelStore } from '../../src/infra/readmodels/mongo.js';
import { readModelStoreContract } from './readmodels.contract.js';

const url = process.env.MONGODB_URL;
/** A database of its own for this run, dropped at the end. */
const dbName = `readmodels_contract_${randomUUID().slice(0, 8)}`;

const describeWithMongo = url ? describe : describe.skip;

describeWithMongo(
  url ? 'MongoReadModelStore' : 'MongoReadModelStore (skipped: set MONGODB_URL to run against a real MongoDB)',
  () => {
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
          await client
            .db(dbName)
            .collection<{ _id: string; n: number; _pos: string }>(`rm_${collection}`)
            .insertOne({ _id: 'a', n: 1, _pos: position });
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
  },
);
