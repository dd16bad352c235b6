import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { Doc, ReadModelStore, ReadModelWrite } from '../../src/infra/readmodels/port.js';

/**
 * The read-model contract, shared by every adapter. `openStore` opens a store on the same
 * underlying data every time (same directory, same database), so a reopened store sees what
 * an earlier one wrote. Every test uses its own collection and projection names, so adapters
 * may share one database across tests and runs.
 */
export function readModelStoreContract(openStore: () => Promise<ReadModelStore>): void {
  let store: ReadModelStore;

  beforeEach(async () => {
    store = await openStore();
  });

  afterEach(async () => {
    await store.close();
  });

  /** Fixed-width positions, ordered as strings like the event store's. */
  const pos = (n: number): string => String(n).padStart(20, '0');
  const unique = (label: string): string => `${label}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;

  const put = (collection: string, key: string, doc: Doc): ReadModelWrite => ({ op: 'put', collection, key, doc });
  const merge = (collection: string, key: string, fields: Doc): ReadModelWrite => ({
    op: 'merge',
    collection,
    key,
    fields,
  });
  const inc = (collection: string, key: string, amounts: Record<string, number>, set?: Doc): ReadModelWrite =>
    set ? { op: 'inc', collection, key, inc: amounts, set } : { op: 'inc', collection, key, inc: amounts };
  const del = (collection: string, key: string): ReadModelWrite => ({ op: 'delete', collection, key });

  it('returns null for a missing document and an empty range for a missing collection', async () => {
    const c = unique('missing');
    expect(await store.get(c, 'nope')).toBeNull();
    expect(await store.range(c)).toEqual([]);
    expect(await store.checkpoint(unique('p'))).toBeNull();
  });

  it('put replaces the whole document', async () => {
    const c = unique('put');
    const p = unique('p');
    await store.commit(p, pos(1), [put(c, 'k', { a: 1, b: 'x', nested: { deep: [1, 2] } })]);
    expect(await store.get(c, 'k')).toEqual({ a: 1, b: 'x', nested: { deep: [1, 2] } });
    await store.commit(p, pos(2), [put(c, 'k', { c: true })]);
    expect(await store.get(c, 'k')).toEqual({ c: true });
  });

  it('merge sets top-level fields and creates the document when missing', async () => {
    const c = unique('merge');
    const p = unique('p');
    await store.commit(p, pos(1), [merge(c, 'k', { a: 1 })]);
    expect(await store.get(c, 'k')).toEqual({ a: 1 });
    await store.commit(p, pos(2), [merge(c, 'k', { b: 'two', a: 3 })]);
    expect(await store.get(c, 'k')).toEqual({ a: 3, b: 'two' });
  });

  it('inc adds to numeric fields (missing counts as 0), sets fields, creates when missing', async () => {
    const c = unique('inc');
    const p = unique('p');
    await store.commit(p, pos(1), [inc(c, 'k', { count: 2, errors: 0 }, { last: 'a' })]);
    expect(await store.get(c, 'k')).toEqual({ count: 2, errors: 0, last: 'a' });
    await store.commit(p, pos(2), [inc(c, 'k', { count: 3, ms: 1.5 }, { last: 'b' })]);
    expect(await store.get(c, 'k')).toEqual({ count: 5, errors: 0, ms: 1.5, last: 'b' });
    await store.commit(p, pos(3), [inc(c, 'k', { count: -5 })]);
    expect(await store.get(c, 'k')).toEqual({ count: 0, errors: 0, ms: 1.5, last: 'b' });
  });

  it('delete removes the document and ignores a missing one', async () => {
    const c = unique('delete');
    const p = unique('p');
    await store.commit(p, pos(1), [put(c, 'k', { a: 1 }), put(c, 'other', { b: 2 })]);
    await store.commit(p, pos(2), [del(c, 'k'), del(c, 'never-existed')]);
    expect(await store.get(c, 'k')).toBeNull();
    expect(await store.get(c, 'other')).toEqual({ b: 2 });
    expect(await store.range(c)).toEqual([{ key: 'other', doc: { b: 2 } }]);
  });

  it('composes several writes to one key within a commit, in order', async () => {
    const c = unique('compose');
    const p = unique('p');
    await store.commit(p, pos(1), [put(c, 'existing', { n: 10, tag: 'old', keep: true }), put(c, 'gone', { x: 1 })]);
    await store.commit(p, pos(2), [
      // two incs add up, on top of the stored value, with a merge in between
      inc(c, 'existing', { n: 1 }),
      merge(c, 'existing', { tag: 'new' }),
      inc(c, 'existing', { n: 2, m: 1 }),
      // two incs on a new key
      inc(c, 'fresh', { n: 1 }),
      inc(c, 'fresh', { n: 1 }, { label: 'f' }),
      // put then merge, then inc
      put(c, 'putMerge', { a: 1 }),
      merge(c, 'putMerge', { b: 2 }),
      inc(c, 'putMerge', { a: 1 }),
      // merge sets a field, a later inc adds to it; a later merge overrides an inc
      merge(c, 'mergeInc', { n: 5 }),
      inc(c, 'mergeInc', { n: 1, k: 4 }),
      merge(c, 'mergeInc', { k: 0 }),
      inc(c, 'mergeInc', { k: 1 }),
      // a put drops what came before it
      inc(c, 'incPut', { n: 1 }),
      put(c, 'incPut', { only: 'this' }),
      // delete then writes start from an empty document
      del(c, 'gone'),
      inc(c, 'gone', { n: 1 }),
      // writes then a delete leave nothing
      put(c, 'putDelete', { a: 1 }),
      merge(c, 'putDelete', { b: 1 }),
      del(c, 'putDelete'),
    ]);
    expect(await store.get(c, 'existing')).toEqual({ n: 13, m: 1, tag: 'new', keep: true });
    expect(await store.get(c, 'fresh')).toEqual({ n: 2, label: 'f' });
    expect(await store.get(c, 'putMerge')).toEqual({ a: 2, b: 2 });
    expect(await store.get(c, 'mergeInc')).toEqual({ n: 6, k: 1 });
    expect(await store.get(c, 'incPut')).toEqual({ only: 'this' });
    expect(await store.get(c, 'gone')).toEqual({ n: 1 });
    expect(await store.get(c, 'putDelete')).toBeNull();
  });

  it('keeps the same key in different collections apart', async () => {
    const a = unique('sep');
    const b = `${a}_b`;
    await store.commit(unique('p'), pos(1), [inc(a, 'k', { n: 1 }), inc(b, 'k', { n: 5 }), put(b, 'x', { y: 1 })]);
    expect(await store.get(a, 'k')).toEqual({ n: 1 });
    expect(await store.get(b, 'k')).toEqual({ n: 5 });
    expect(await store.range(a)).toEqual([{ key: 'k', doc: { n: 1 } }]);
  });

  it('ranges over keys in order with prefix, gte, lt, limit and reverse', async () => {
    const c = unique('range');
    const neighbour = `${c}x`;
    const keys = ['a', 'a:1', 'a:2', 'a:10', 'ab', 'b', 'b:1', 'c'];
    await store.commit(unique('p'), pos(1), [...keys.map((key) => put(c, key, { key })), put(neighbour, 'a', { key: 'neighbour' })]);
    const keysOf = async (options?: Parameters<ReadModelStore['range']>[1]): Promise<string[]> => (await store.range(c, options)).map((entry) => entry.key);

    expect(await keysOf()).toEqual(['a', 'a:1', 'a:10', 'a:2', 'ab', 'b', 'b:1', 'c']);
    expect((await store.range(c, { prefix: 'b:' }))[0]).toEqual({ key: 'b:1', doc: { key: 'b:1' } });
    expect(await keysOf({ prefix: 'a:' })).toEqual(['a:1', 'a:10', 'a:2']);
    expect(await keysOf({ prefix: 'a' })).toEqual(['a', 'a:1', 'a:10', 'a:2', 'ab']);
    expect(await keysOf({ prefix: 'zz' })).toEqual([]);
    expect(await keysOf({ gte: 'a:2' })).toEqual(['a:2', 'ab', 'b', 'b:1', 'c']);
    expect(await keysOf({ lt: 'ab' })).toEqual(['a', 'a:1', 'a:10', 'a:2']);
    expect(await keysOf({ gte: 'a:10', lt: 'b:1' })).toEqual(['a:10', 'a:2', 'ab', 'b']);
    expect(await keysOf({ gte: 'b', lt: 'b' })).toEqual([]);
    expect(await keysOf({ gte: 'c', lt: 'a' })).toEqual([]);
    expect(await keysOf({ limit: 3 })).toEqual(['a', 'a:1', 'a:10']);
    expect(await keysOf({ limit: 0 })).toEqual([]);
    expect(await keysOf({ limit: 100 })).toHaveLength(keys.length);
    expect(await keysOf({ reverse: true })).toEqual(['c', 'b:1', 'b', 'ab', 'a:2', 'a:10', 'a:1', 'a']);
    expect(await keysOf({ reverse: true, limit: 2 })).toEqual(['c', 'b:1']);
    expect(await keysOf({ prefix: 'a:', reverse: true, limit: 2 })).toEqual(['a:2', 'a:10']);
    // prefix and bounds narrow each other
    expect(await keysOf({ prefix: 'a', gte: 'a:10' })).toEqual(['a:10', 'a:2', 'ab']);
    expect(await keysOf({ prefix: 'a', lt: 'a:2' })).toEqual(['a', 'a:1', 'a:10']);
    expect(await keysOf({ prefix: 'a:', gte: '0', lt: 'zz' })).toEqual(['a:1', 'a:10', 'a:2']);
    expect(await keysOf({ prefix: 'a', gte: 'a:1', lt: 'ab', reverse: true, limit: 2 })).toEqual(['a:2', 'a:10']);
  });

  it('ranges by a prefix that ends in a non-ASCII character', async () => {
    const c = unique('unicode');
    await store.commit(unique('p'), pos(1), [
      put(c, 'é', { n: 1 }),
      put(c, 'é:1', { n: 2 }),
      put(c, 'é\u{1F600}', { n: 3 }),
      put(c, 'ê', { n: 4 }),
      put(c, 'e', { n: 5 }),
    ]);
    const keys = (await store.range(c, { prefix: 'é' })).map((entry) => entry.key);
    expect(keys).toEqual(['é', 'é:1', 'é\u{1F600}']);
  });

  it('moves the checkpoint with the commit, also for an empty commit', async () => {
    const c = unique('cp');
    const p = unique('p');
    expect(await store.checkpoint(p)).toBeNull();
    await store.commit(p, pos(1), [inc(c, 'k', { n: 1 })]);
    expect(await store.checkpoint(p)).toBe(pos(1));
    await store.commit(p, pos(7), []);
    expect(await store.checkpoint(p)).toBe(pos(7));
    expect(await store.get(c, 'k')).toEqual({ n: 1 });
  });

  it('ignores a commit at the stored position or before it', async () => {
    const c = unique('replay');
    const p = unique('p');
    await store.commit(p, pos(5), [inc(c, 'k', { n: 1 }), put(c, 'doc', { v: 5 })]);
    await store.commit(p, pos(5), [inc(c, 'k', { n: 1 }), put(c, 'doc', { v: 'again' })]);
    await store.commit(p, pos(3), [inc(c, 'k', { n: 100 }), del(c, 'doc'), put(c, 'older', { v: 3 })]);
    expect(await store.get(c, 'k')).toEqual({ n: 1 });
    expect(await store.get(c, 'doc')).toEqual({ v: 5 });
    expect(await store.get(c, 'older')).toBeNull();
    expect(await store.checkpoint(p)).toBe(pos(5));
  });

  it('keeps each projection’s checkpoint apart', async () => {
    const c = unique('twoProjections');
    const p1 = unique('p1');
    const p2 = unique('p2');
    await store.commit(p1, pos(9), [inc(c, 'k', { a: 1 })]);
    await store.commit(p2, pos(2), [inc(c, 'k', { b: 1 })]);
    expect(await store.checkpoint(p1)).toBe(pos(9));
    expect(await store.checkpoint(p2)).toBe(pos(2));
    expect(await store.get(c, 'k')).toEqual({ a: 1, b: 1 });
  });

  it('replaying a whole sequence of commits changes nothing', async () => {
    const totals = unique('totals');
    const items = unique('items');
    const p = unique('p');
    const commits: Array<[string, ReadModelWrite[]]> = [
      [pos(1), [inc(totals, 'all', { n: 1 }), put(items, 'i1', { name: 'one' })]],
      [pos(2), [inc(totals, 'all', { n: 1 }), put(items, 'i2', { name: 'two' }), inc(totals, 'i2', { n: 1 })]],
      [pos(4), [merge(items, 'i1', { name: 'uno', tag: 't' }), inc(totals, 'all', { n: 1, ms: 3 })]],
      [pos(8), [del(items, 'i2'), inc(totals, 'all', { n: -1 }), inc(totals, 'i2', { n: 1 }, { closed: true })]],
      [pos(9), [put(items, 'i3', { name: 'three' }), del(items, 'i3'), merge(items, 'i4', { name: 'four' })]],
    ];
    for (const [position, writes] of commits) await store.commit(p, position, writes);
    const snapshot = async (): Promise<unknown> => ({
      totals: await store.range(totals),
      items: await store.range(items),
      checkpoint: await store.checkpoint(p),
    });
    const before = await snapshot();
    expect(before).toEqual({
      totals: [
        { key: 'all', doc: { n: 2, ms: 3 } },
        { key: 'i2', doc: { n: 2, closed: true } },
      ],
      items: [
        { key: 'i1', doc: { name: 'uno', tag: 't' } },
        { key: 'i4', doc: { name: 'four' } },
      ],
      checkpoint: pos(9),
    });
    for (const [position, writes] of commits) await store.commit(p, position, writes);
    expect(await snapshot()).toEqual(before);
  });

  it('reset drops the given collections and the checkpoint, and nothing else', async () => {
    const a = unique('resetA');
    const b = unique('resetB');
    const kept = unique('resetKept');
    const p = unique('p');
    const other = unique('other');
    await store.commit(p, pos(3), [inc(a, 'k', { n: 1 }), put(b, 'k', { v: 1 })]);
    await store.commit(other, pos(4), [put(kept, 'k', { v: 'kept' })]);
    await store.write([put(`${a}_sibling`, 'k', { v: 'sibling' })]);
    await store.reset(p, [a, b]);
    expect(await store.range(a)).toEqual([]);
    expect(await store.get(b, 'k')).toBeNull();
    expect(await store.checkpoint(p)).toBeNull();
    expect(await store.get(kept, 'k')).toEqual({ v: 'kept' });
    expect(await store.get(`${a}_sibling`, 'k')).toEqual({ v: 'sibling' });
    expect(await store.checkpoint(other)).toBe(pos(4));
    // a rebuild replays from the start
    await store.commit(p, pos(1), [inc(a, 'k', { n: 1 })]);
    expect(await store.get(a, 'k')).toEqual({ n: 1 });
    expect(await store.checkpoint(p)).toBe(pos(1));
  });

  it('reset of collections that never existed is fine', async () => {
    const p = unique('p');
    await store.reset(p, [unique('never')]);
    expect(await store.checkpoint(p)).toBeNull();
  });

  it('write applies writes with the same semantics and no checkpoint', async () => {
    const c = unique('write');
    await store.write([inc(c, 'k', { n: 1 }), inc(c, 'k', { n: 2 }, { s: 'x' }), put(c, 'doc', { a: 1 })]);
    await store.write([inc(c, 'k', { n: 1 }), merge(c, 'doc', { b: 2 }), del(c, 'nothing')]);
    await store.write([]);
    expect(await store.get(c, 'k')).toEqual({ n: 4, s: 'x' });
    expect(await store.get(c, 'doc')).toEqual({ a: 1, b: 2 });
    await store.write([del(c, 'doc')]);
    expect(await store.get(c, 'doc')).toBeNull();
  });

  it('write and commit work on the same documents', async () => {
    const c = unique('mixed');
    const p = unique('p');
    await store.write([put(c, 'k', { n: 1 })]);
    await store.commit(p, pos(1), [inc(c, 'k', { n: 1 })]);
    await store.write([inc(c, 'k', { n: 1 })]);
    await store.commit(p, pos(2), [inc(c, 'k', { n: 1 })]);
    await store.commit(p, pos(2), [inc(c, 'k', { n: 1 })]);
    expect(await store.get(c, 'k')).toEqual({ n: 4 });
  });

  it('loses no increment to concurrent commits and writes', async () => {
    const c = unique('concurrent');
    const p = unique('p');
    const commits = Array.from({ length: 40 }, (_, i) => store.commit(p, pos(i + 1), [inc(c, 'k', { n: 1 }), inc(c, `k${i % 4}`, { n: 1 })]));
    const writes = Array.from({ length: 20 }, () => store.write([inc(c, 'w', { n: 1 })]));
    await Promise.all([...commits, ...writes]);
    expect(await store.get(c, 'k')).toEqual({ n: 40 });
    expect((await store.range(c, { prefix: 'k' })).map((entry) => entry.doc)).toEqual([{ n: 40 }, { n: 10 }, { n: 10 }, { n: 10 }, { n: 10 }]);
    expect(await store.get(c, 'w')).toEqual({ n: 20 });
    expect(await store.checkpoint(p)).toBe(pos(40));
  });

  it('keeps documents and checkpoints across close and reopen', async () => {
    const c = unique('persist');
    const p = unique('p');
    await store.commit(p, pos(2), [inc(c, 'k', { n: 2 }, { s: 'x' })]);
    await store.write([put(c, 'w', { v: 1 })]);
    await store.close();
    store = await openStore();
    expect(await store.get(c, 'k')).toEqual({ n: 2, s: 'x' });
    expect(await store.get(c, 'w')).toEqual({ v: 1 });
    expect(await store.checkpoint(p)).toBe(pos(2));
    await store.commit(p, pos(2), [inc(c, 'k', { n: 2 })]);
    expect(await store.get(c, 'k')).toEqual({ n: 2, s: 'x' });
  });

  it('does not let a caller mutate stored documents through its own objects', async () => {
    const c = unique('copy');
    const doc: Doc = { a: 1 };
    await store.commit(unique('p'), pos(1), [put(c, 'k', doc)]);
    doc['a'] = 2;
    const read = await store.get(c, 'k');
    expect(read).toEqual({ a: 1 });
    read!['a'] = 3;
    expect(await store.get(c, 'k')).toEqual({ a: 1 });
  });
}
