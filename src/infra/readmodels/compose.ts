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

function numeric(value: unknown): number {
  return typeof value === 'number' ? value : 0;
}

/** Applies a partial update onto a document; a missing or non-numeric field counts as 0 for `inc`. */
export function applyUpdate(doc: Doc | null, set: Doc, inc: Record<string, number>): Doc {
  const next: Doc = { ...(doc ?? {}) };
  for (const [field, amount] of Object.entries(inc)) next[field] = numeric(next[field]) + amount;
  Object.assign(next, set);
  return next;
}

/** Resolves a change against the stored document: the new document, or null for "absent". */
export function applyChange(stored: Doc | null, change: KeyChange): Doc | null {
  return change.kind === 'replace' ? change.doc : applyUpdate(stored, change.set, change.inc);
}

function applyWriteToDoc(doc: Doc | null, write: ReadModelWrite): Doc | null {
  switch (write.op) {
    case 'put':
      return { ...write.doc };
    case 'delete':
      return null;
    case 'merge':
      return applyUpdate(doc, write.fields, {});
    case 'inc':
      return applyUpdate(doc, write.set ?? {}, write.inc);
  }
}

function foldIntoUpdate(
  update: { set: Doc; inc: Record<string, number> },
  write: Extract<ReadModelWrite, { op: 'merge' | 'inc' }>,
): void {
  const { set, inc } = update;
  const setFields = write.op === 'merge' ? write.fields : (write.set ?? {});
  if (write.op === 'inc') {
    for (const [field, amount] of Object.entries(write.inc)) {
      if (field in set) set[field] = numeric(set[field]) + amount;
      else inc[field] = (inc[field] ?? 0) + amount;
    }
  }
  for (const [field, value] of Object.entries(setFields)) {
    delete inc[field];
    set[field] = value;
  }
}

function composeOne(previous: KeyChange | undefined, write: ReadModelWrite): KeyChange {
  if (previous?.kind === 'replace') return { kind: 'replace', doc: applyWriteToDoc(previous.doc, write) };
  if (write.op === 'put' || write.op === 'delete') return { kind: 'replace', doc: applyWriteToDoc(null, write) };
  const update = previous ?? { kind: 'update' as const, set: {}, inc: {} };
  foldIntoUpdate(update, write);
  return update;
}

/** Folds writes into one change per (collection, key), in the order keys were first touched. */
export function composeWrites(writes: ReadonlyArray<ReadModelWrite>): ComposedChange[] {
  const byKey = new Map<string, ComposedChange>();
  for (const write of writes) {
    const id = `${write.collection}\x00${write.key}`;
    const entry = byKey.get(id);
    const change = composeOne(entry?.change, write);
    if (entry) entry.change = change;
    else byKey.set(id, { collection: write.collection, key: write.key, change });
  }
  return [...byKey.values()];
}
