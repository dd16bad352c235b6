import type { Doc, ReadModelWrite } from './port.js';

/**
 * What a list of writes does to one document, folded into a single change so that every
 * adapter applies one operation per key (and writes to one key compose in order).
 */
export type KeyChange =
  /** The document becomes `doc`, or is deleted when `doc` is null. */
  | { kind: 'replace'; doc: Doc | null }
  /** Applied onto the stored document (or an empty one): add `inc`, then set `set`. A field is in one of the two, never both. */
  | { kind: 'update'; set: Doc; inc: Record<string, number> };

export interface ComposedChange {
  collection: string;
  key: string;
  change: KeyChange;
}

/*
 * These run for every write of every replayed event (several per event): plain `for...in`
 * loops over own enumerable fields, no Object.entries arrays, no per-write copies.
 */

function numeric(value: unknown): number {
  return typeof value === 'number' ? value : 0;
}

const { hasOwn } = Object;

/** Applies a partial update onto a document; a missing or non-numeric field counts as 0 for `inc`. */
export function applyUpdate(doc: Doc | null, set: Doc, inc: Record<string, number>): Doc {
  const next: Doc = { ...doc };
  for (const field in inc) if (hasOwn(inc, field)) next[field] = numeric(next[field]) + (inc[field] as number);
  for (const field in set) if (hasOwn(set, field)) next[field] = set[field];
  return next;
}

/** Resolves a change against the stored document: the new document, or null for "absent". */
export function applyChange(stored: Doc | null, change: KeyChange): Doc | null {
  return change.kind === 'replace' ? change.doc : applyUpdate(stored, change.set, change.inc);
}

/**
 * The document an update makes, reusing the change's own `inc` object when there is no stored
 * document: composeWrites copies what it is given, so a change applied once may be consumed
 * (one object less per new key of a replay). `inc` and `set` never share a field.
 */
export function consumeUpdate(stored: Doc | null, change: Extract<KeyChange, { kind: 'update' }>): Doc {
  return stored === null ? Object.assign(change.inc as Doc, change.set) : applyUpdate(stored, change.set, change.inc);
}

function applyWriteToDoc(doc: Doc | null, write: ReadModelWrite): Doc | null {
  switch (write.op) {
    case 'put':
      // A copy: an adapter that composes before its queued commit runs (MongoDB) must not see later changes to the caller's object.
      return { ...write.doc };
    case 'delete':
      return null;
    case 'merge':
      return applyUpdate(doc, write.fields, {});
    case 'inc':
      return applyUpdate(doc, write.set ?? {}, write.inc);
  }
}

function foldIntoUpdate(update: { set: Doc; inc: Record<string, number> }, write: Extract<ReadModelWrite, { op: 'merge' | 'inc' }>): void {
  const { set, inc } = update;
  if (write.op === 'inc') {
    const amounts = write.inc;
    for (const field in amounts) {
      if (!hasOwn(amounts, field)) continue;
      const amount = amounts[field] as number;
      if (hasOwn(set, field)) set[field] = numeric(set[field]) + amount;
      else inc[field] = (inc[field] ?? 0) + amount;
    }
  }
  const fields = write.op === 'merge' ? write.fields : write.set;
  if (fields === undefined) return;
  for (const field in fields) {
    if (!hasOwn(fields, field)) continue;
    // A set after an inc of the same field wins over it (rare: `delete` is not free).
    if (hasOwn(inc, field)) delete inc[field];
    set[field] = fields[field];
  }
}

/** The first update of a key: copies of the write's fields (a spread copies a shape at once, field-by-field stores build it one transition at a time). */
function firstUpdate(write: Extract<ReadModelWrite, { op: 'merge' | 'inc' }>): KeyChange {
  if (write.op === 'merge') return { kind: 'update', set: { ...write.fields }, inc: {} };
  const update = { kind: 'update' as const, set: {}, inc: { ...write.inc } };
  if (write.set !== undefined) foldIntoUpdate(update, { op: 'merge', collection: write.collection, key: write.key, fields: write.set });
  return update;
}

function composeOne(previous: KeyChange | undefined, write: ReadModelWrite): KeyChange {
  if (previous?.kind === 'replace') return { kind: 'replace', doc: applyWriteToDoc(previous.doc, write) };
  if (write.op === 'put' || write.op === 'delete') return { kind: 'replace', doc: applyWriteToDoc(null, write) };
  if (previous === undefined) return firstUpdate(write);
  foldIntoUpdate(previous, write);
  return previous;
}

/** Folds writes into one change per (collection, key), in the order keys were first touched. */
export function composeWrites(writes: ReadonlyArray<ReadModelWrite>): ComposedChange[] {
  // Keyed by collection, then key: no concatenated id string per write.
  const byCollection = new Map<string, Map<string, ComposedChange>>();
  const composed: ComposedChange[] = [];
  for (const write of writes) {
    let byKey = byCollection.get(write.collection);
    if (byKey === undefined) {
      byKey = new Map();
      byCollection.set(write.collection, byKey);
    }
    let entry = byKey.get(write.key);
    if (entry) {
      entry.change = composeOne(entry.change, write);
    } else {
      entry = { collection: write.collection, key: write.key, change: composeOne(undefined, write) };
      byKey.set(write.key, entry);
      composed.push(entry);
    }
  }
  return composed;
}
