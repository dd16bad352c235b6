import type { ClassicLevel } from 'classic-level';
import {
  eventIdKey,
  eventIdRange,
  LAST_SEQ_KEY,
  logKey,
  PENDING_TRUNCATIONS,
  pad,
  parseStreamRun,
  pendingTruncationKey,
  streamKey,
  streamRange,
  streamRunEntry,
} from './levelKeys.js';

type Db = ClassicLevel<string, string>;

/** Deletes put in one batch: each batch is a write of its own, and the event loop turns in between. */
const DELETES_PER_BATCH = 5000;

/** The log's sequence numbers a truncation deleted, for the compaction that gives their space back. */
export interface DroppedSeqs {
  first: number;
  last: number;
}

/**
 * The deletes of a truncation of `streamId` before revision `cut`, once the truncation point
 * (`t\0<stream>`, which stream reads go by from then on) and the pending mark (`p\0<stream>`)
 * are written: the log entries of the stream's runs before `cut`, then the runs (the one
 * that straddles `cut` is written again from `cut`, in the same batch as the delete of its old
 * key) and the ids of the dropped events, and last the pending mark. Every step can run again:
 * a store opened after a crash in between finishes it (`resumeTruncations`). `lastSeq` is the
 * log's last sequence number, kept beside the log in case its last entry goes.
 */
export async function dropBefore(
  stores: { log: Db; index: Db },
  streamId: string,
  cut: number,
  lastSeq: number,
  options: { resuming?: boolean } = {},
): Promise<DroppedSeqs | null> {
  const { log, index } = stores;
  const range = streamRange(streamId);
  const below = { gte: range.gte, lt: streamKey(streamId, cut) };
  let first = Number.POSITIVE_INFINITY;
  let last = 0;
  /**
   * The ids of the events dropped, read from the log entries as they go: a stream's id keys sort
   * by id, not revision, and reading them all for every truncation made a long stream's
   * retention quadratic. Null when they cannot all be known that way (a truncation resumed after
   * a crash, whose log entries may be gone already; too many to hold): then every id is read.
   */
  let droppedIds: string[] | null = options.resuming ? null : [];

  // The log's last sequence number first: in case its last entry goes, a reopen must not hand it out again.
  let batch = log.batch();
  batch.put(LAST_SEQ_KEY, pad(lastSeq));
  let deletes = 0;
  // The log entries, run by run (a run's events are consecutive in the log).
  for await (const [key, value] of index.iterator(below)) {
    const { firstRevision, firstSeq, count } = parseStreamRun(range.gte, key, value);
    const n = Math.min(count, cut - firstRevision);
    if (n <= 0) continue;
    for await (const [logEntry, event] of log.iterator({ gte: logKey(firstSeq), lt: logKey(firstSeq + n) })) {
      batch.del(logEntry);
      if (droppedIds !== null) {
        const id = sniffEventId(event);
        if (id === undefined || droppedIds.length >= MAX_IDS_HELD) droppedIds = null;
        else droppedIds.push(id);
      }
      if (++deletes % DELETES_PER_BATCH === 0) {
        await batch.write();
        batch = log.batch();
      }
    }
    first = Math.min(first, firstSeq);
    last = Math.max(last, firstSeq + n - 1);
  }
  await batch.write({ sync: true });

  // The runs before the cut; the last of them may go on past it.
  batch = index.batch();
  deletes = 0;
  let straddling: [key: string, value: string] | undefined;
  for await (const entry of index.iterator(below)) {
    if (straddling !== undefined) {
      batch.del(straddling[0]);
      if (++deletes % DELETES_PER_BATCH === 0) {
        await batch.write();
        batch = index.batch();
      }
    }
    straddling = entry;
  }
  if (straddling !== undefined) {
    const { firstRevision, firstSeq, count } = parseStreamRun(range.gte, ...straddling);
    batch.del(straddling[0]);
    const kept = firstRevision + count - cut;
    if (kept > 0) batch.put(...streamRunEntry(streamId, cut, firstSeq + (cut - firstRevision), kept));
  }

  // The ids of the dropped events.
  const dropId = async (key: string): Promise<void> => {
    batch.del(key);
    if (++deletes % DELETES_PER_BATCH === 0) {
      await batch.write();
      batch = index.batch();
    }
  };
  if (droppedIds !== null) {
    for (const id of droppedIds) await dropId(eventIdKey(streamId, id));
  } else {
    for await (const [key, value] of index.iterator(eventIdRange(streamId))) {
      if (Number(value.slice(0, value.indexOf(' '))) < cut) await dropId(key);
    }
  }
  batch.del(pendingTruncationKey(streamId));
  await batch.write({ sync: true });
  return last > 0 ? { first, last } : null;
}

/** Ids held while a truncation reads them from the log (~50 MB); beyond, the stream's id keys are read instead. */
const MAX_IDS_HELD = 1_000_000;

const ID_FIELD = '"id":"';

/** The id of an event's log value without parsing all of it (the id comes right after the stream and revision), or undefined. */
function sniffEventId(value: string): string | undefined {
  const at = value.indexOf(ID_FIELD);
  if (at < 0 || at > 400) return undefined;
  const start = at + ID_FIELD.length;
  const end = value.indexOf('"', start);
  const id = value.slice(start, end);
  return end < 0 || id.includes('\\') ? undefined : id;
}

/** Truncations a crash interrupted: each stream and its cut, from the pending marks. */
export async function pendingTruncations(index: Db): Promise<Array<{ streamId: string; cut: number }>> {
  const entries = await index.iterator(PENDING_TRUNCATIONS).all();
  return entries.map(([key, value]) => ({ streamId: key.slice(PENDING_TRUNCATIONS.gte.length), cut: Number(value) }));
}
