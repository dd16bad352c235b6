import { expect } from 'vitest';
import { encodeEvent, type VersionedEvent } from '../../src/domain/eventCodec.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { applyUpdate } from '../../src/infra/readmodels/compose.js';
import type { Doc, ReadModelWrite } from '../../src/infra/readmodels/port.js';
import type { Projection } from '../../src/projections/projection.js';

/**
 * given events / then writes (or then documents), as in emmett's projection specifications: a
 * projection is pure, so its spec needs no store. `thenDocuments` applies the writes to plain
 * documents twice over, event by event and as one batch (`projectBatch`, where the projection
 * folds), and expects the same documents from both: a replay in batches must equal the live
 * projection.
 */

/** An event as a spec writes it: on its stream, with its type, version and data. */
export type SpecEvent = VersionedEvent & { streamId: string };

/** Events as the store hands them to the projector: positions and revisions in order. */
export function stored(events: SpecEvent[]): StoredEvent[] {
  const revisions = new Map<string, number>();
  return events.map((event, i) => {
    const { id, type, data, metadata } = encodeEvent(event, `00000000-0000-7000-8000-${String(i).padStart(12, '0')}`);
    const revision = revisions.get(event.streamId) ?? 0;
    revisions.set(event.streamId, revision + 1);
    const at = typeof data['at'] === 'string' ? data['at'] : '2026-11-01T00:00:00.000Z';
    return { streamId: event.streamId, revision, position: String(i).padStart(12, '0'), id, type, data, metadata: metadata ?? {}, created: at };
  });
}

/** collection → key → document. */
export type Documents = Record<string, Record<string, Doc>>;

/** What the writes make of an empty store, as plain documents (expiry and finality do not change a document). */
export function applyWrites(writes: readonly ReadModelWrite[]): Documents {
  const out: Documents = {};
  for (const write of writes) {
    out[write.collection] ??= {};
    const collection = out[write.collection] as Record<string, Doc>;
    const current = collection[write.key] ?? null;
    if (write.op === 'delete') delete collection[write.key];
    else if (write.op === 'put') collection[write.key] = { ...write.doc };
    else if (write.op === 'merge') collection[write.key] = applyUpdate(current, write.fields, {});
    else collection[write.key] = applyUpdate(current, write.set ?? {}, write.inc);
  }
  return out;
}

export function projectionSpec(projection: Projection) {
  const oneByOne = (events: StoredEvent[]): ReadModelWrite[] =>
    events.filter((e) => projection.eventTypes?.has(e.type) ?? true).flatMap((e) => projection.project(e));
  return {
    given: (events: SpecEvent[]) => {
      const history = stored(events);
      return {
        // biome-ignore lint/suspicious/noThenProperty: given/then is the pattern's vocabulary; this object is never awaited
        then: (writes: ReadModelWrite[]) => expect(oneByOne(history)).toEqual(writes),
        thenDocuments: (documents: Documents) => {
          expect(applyWrites(oneByOne(history))).toEqual(documents);
          if (projection.projectBatch) {
            const batchable = history.filter((e) => projection.eventTypes?.has(e.type) ?? true);
            expect(applyWrites(projection.projectBatch(batchable))).toEqual(documents);
          }
        },
        /** For projections whose documents are too many to write out: a batch folds to what event-by-event gives. */
        thenFoldsAlike: () => {
          if (!projection.projectBatch) throw new Error(`${projection.name} has no projectBatch`);
          const batchable = history.filter((e) => projection.eventTypes?.has(e.type) ?? true);
          const documents = applyWrites(oneByOne(history));
          expect(Object.keys(documents).length).toBeGreaterThan(0);
          expect(applyWrites(projection.projectBatch(batchable))).toEqual(documents);
        },
        thenNotifications: (messages: string[]) => expect(history.flatMap((e) => projection.notifications?.(e) ?? [])).toEqual(messages),
      };
    },
  };
}
