import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { PlanCatalog } from '../domain/plans.js';
import { CALL_FIELD_COUNT, type RawRowFields } from '../domain/usage.js';
import type { EventStore, Position, Subscription, SubscriptionItem } from '../infra/eventstore/port.js';
import { LevelReadModelStore } from '../infra/readmodels/level.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from '../projections/core.js';
import type { Projection } from '../projections/projection.js';
import { purgeAccountUsage } from '../projections/retention.js';
import { ProjectionRunner } from '../projections/runner.js';
import { USAGE_METRICS } from '../projections/usageMetrics.js';

export interface Difference {
  collection: string;
  /** The document's key; for raw rows, `<account>/<hour>` (compared call by call, see compareRawRows). */
  key: string;
  /** `missing`: the replay has the document, the read models do not; `extra`: the other way; `differs`: both, with these top-level fields unequal. */
  kind: 'missing' | 'extra' | 'differs';
  /** The unequal top-level fields; for raw rows, the request id of the first call that differs (the replay's, where both have one). */
  fields?: string[];
}

export interface VerifyResult {
  /** Each projection and the position the comparison covers (its checkpoint in the read models). */
  projections: Array<{ name: string; position: Position | null }>;
  documents: number;
  differences: number;
}

const PAGE = 1000;

/**
 * Replays the log into fresh read models and compares them, document by document, with the
 * live ones; `report` hears each difference. Each projection is replayed up to its own
 * checkpoint in the live read models (a service stopped mid-way leaves events unprojected,
 * which its next start projects: not a difference). The fresh read models are a LevelDB under
 * the temporary directory, removed afterwards: a long log's read models need not fit in memory.
 *
 * Usage documents past their plan's retention are compared as the retention job leaves them:
 * the replay keeps every document and both sides are then purged with the same rule at the
 * same time (on the live side only in view, nothing is written), so that a document the
 * job has not deleted yet is no difference.
 */
export async function verifyReadModels(options: {
  store: EventStore;
  live: ReadModelStore;
  projections: readonly Projection[];
  plans: PlanCatalog;
  report(difference: Difference): Promise<void>;
  now?: Date;
}): Promise<VerifyResult> {
  const { store, live, projections, plans } = options;
  const now = options.now ?? new Date();
  const checkpoints = await Promise.all(projections.map(async (p) => ({ projection: p, position: await live.checkpoint(p.name) })));
  const dir = await mkdtemp(join(tmpdir(), 'gw-verify-'));
  try {
    const replay = await LevelReadModelStore.open(dir, { bulkLoad: true });
    try {
      const byPosition = new Map<Position, Projection[]>();
      for (const { projection, position } of checkpoints) {
        if (position !== null) byPosition.set(position, [...(byPosition.get(position) ?? []), projection]);
      }
      for (const [position, group] of byPosition) {
        // Expiry is left to the purge below (now 0: no write is dropped as expired).
        const runner = new ProjectionRunner(upTo(store, position), replay, group, null, () => 0);
        await runner.start();
        await runner.caughtUp;
        await runner.stop();
      }
      const liveView = new RetentionView(live);
      await applyRetention(replay, replay, plans, now);
      await applyRetention(live, liveView, plans, now);

      let documents = 0;
      let differences = 0;
      for (const { projection } of checkpoints) {
        for (const collection of projection.collections) {
          const compared = collection === USAGE_METRICS.requestBlocks ? compareRawRows(liveView, replay) : compare(collection, liveView, replay);
          for await (const d of compared) {
            if (d === null) {
              documents++;
              continue;
            }
            differences++;
            await options.report(d);
          }
        }
      }
      const after = await Promise.all(projections.map((p) => live.checkpoint(p.name)));
      if (after.some((position, i) => position !== checkpoints[i]?.position)) {
        throw new Error('The read models changed while they were compared: a projector is running. Stop it (ROLE=projector, or the service) and verify again.');
      }
      return { projections: checkpoints.map(({ projection, position }) => ({ name: projection.name, position })), documents, differences };
    } finally {
      await replay.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The retention job's pass over every account of `accounts`, deleting through `target`. */
async function applyRetention(accounts: ReadModelStore, target: ReadModelStore, plans: PlanCatalog, now: Date): Promise<void> {
  let gte = '';
  for (;;) {
    const page = await accounts.range<AccountDoc>(COLLECTIONS.accounts, { gte, limit: PAGE });
    for (const { key, doc } of page) {
      const retentionDays = plans[doc.plan]?.retention_days;
      if (retentionDays !== undefined) await purgeAccountUsage(target, key, now, retentionDays);
    }
    const last = page[page.length - 1];
    if (page.length < PAGE || !last) return;
    gte = `${last.key}\0`;
  }
}

/** Byte order of the keys' UTF-8, as LevelDB and MongoDB order them. */
const compareKeys = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** Both sides' documents of one collection in key order, merged: null for each equal pair, else the difference. */
async function* compare(collection: string, live: ReadModelStore, replay: ReadModelStore): AsyncGenerator<Difference | null> {
  const a = documents(live, collection)[Symbol.asyncIterator]();
  const b = documents(replay, collection)[Symbol.asyncIterator]();
  let x = await a.next();
  let y = await b.next();
  while (!x.done || !y.done) {
    const order = x.done ? 1 : y.done ? -1 : compareKeys(x.value.key, y.value.key);
    if (order < 0 && !x.done) {
      yield { collection, key: x.value.key, kind: 'extra' };
      x = await a.next();
    } else if (order > 0 && !y.done) {
      yield { collection, key: y.value.key, kind: 'missing' };
      y = await b.next();
    } else if (!x.done && !y.done) {
      const fields = unequalFields(x.value.doc, y.value.doc);
      yield fields.length === 0 ? null : { collection, key: x.value.key, kind: 'differs', fields };
      x = await a.next();
      y = await b.next();
    }
  }
}

/**
 * The raw rows of both sides, an account's hour at a time, compared call by call in the order
 * recorded: null for each equal hour, else the difference. Not document by document, because
 * the documents are cut as the version that wrote them cut them: before this one, in blocks of
 * 16 consecutive calls keyed by the block's number, now one per usage event keyed by its first
 * call. Both orders are the calls' order in the account's usage stream, and an upgraded store
 * holds its older documents first in each hour (their keys are below every later call's
 * number). A row of a version before the charged and cache columns is compared on the call's
 * fields it has (the exports tell its charged from its status). Memory: a page of documents.
 */
async function* compareRawRows(live: ReadModelStore, replay: ReadModelStore): AsyncGenerator<Difference | null> {
  const collection = USAGE_METRICS.requestBlocks;
  const a = rawRows(live)[Symbol.asyncIterator]();
  const b = rawRows(replay)[Symbol.asyncIterator]();
  const next = async (rows: AsyncIterator<RawRowAt>): Promise<RawRowAt | null> => {
    const r = await rows.next();
    return r.done ? null : r.value;
  };
  let x = await next(a);
  let y = await next(b);
  for (;;) {
    const first = x === null ? y : y === null ? x : compareKeys(`${x.hour}/`, `${y.hour}/`) <= 0 ? x : y;
    if (first === null) return;
    const { hour } = first;
    let liveRows = 0;
    let replayRows = 0;
    let firstUnequal: string | null = null;
    for (;;) {
      const inLive = x !== null && x.hour === hour ? x : null;
      const inReplay = y !== null && y.hour === hour ? y : null;
      if (inLive === null && inReplay === null) break;
      if (firstUnequal === null && (inLive === null || inReplay === null || !sameRawRow(inLive.row, inReplay.row))) {
        firstUnequal = (inReplay ?? inLive)?.row[0] ?? hour;
      }
      if (inLive) {
        liveRows++;
        x = await next(a);
      }
      if (inReplay) {
        replayRows++;
        y = await next(b);
      }
    }
    if (replayRows === 0) yield { collection, key: hour, kind: 'extra' };
    else if (liveRows === 0) yield { collection, key: hour, kind: 'missing' };
    else yield firstUnequal === null ? null : { collection, key: hour, kind: 'differs', fields: [firstUnequal] };
  }
}

interface RawRowAt {
  /** `<account>/<hour>`: the key less the document's first call. */
  hour: string;
  row: RawRowFields;
}

/** Each raw row with its `<account>/<hour>`, in key order and, within a document, in the order recorded. */
async function* rawRows(rm: ReadModelStore): AsyncGenerator<RawRowAt> {
  for await (const { key, doc } of documents(rm, USAGE_METRICS.requestBlocks)) {
    const hour = key.slice(0, key.lastIndexOf('/'));
    // Integer-like fields enumerate in ascending order: the document's calls in the order recorded.
    for (const slot in doc) yield { hour, row: doc[slot] as RawRowFields };
  }
}

const sameRawRow = (live: RawRowFields, replayed: RawRowFields): boolean =>
  live.length === CALL_FIELD_COUNT ? isDeepStrictEqual(live, replayed.slice(0, CALL_FIELD_COUNT)) : isDeepStrictEqual(live, replayed);

async function* documents(rm: ReadModelStore, collection: string): AsyncGenerator<{ key: string; doc: Doc }> {
  let gte = '';
  for (;;) {
    const page = await rm.range(collection, { gte, limit: PAGE });
    yield* page;
    const last = page[page.length - 1];
    if (page.length < PAGE || !last) return;
    gte = `${last.key}\0`;
  }
}

function unequalFields(a: Doc, b: Doc): string[] {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
  return keys.filter((k) => !isDeepStrictEqual(a[k], b[k]));
}

/** The log as it was at `last`: a subscription that ends there as if caught up. */
export function upTo(store: EventStore, last: Position): EventStore {
  return {
    append: (...args) => store.append(...args),
    readStream: (...args) => store.readStream(...args),
    truncateBefore: (...args) => store.truncateBefore(...args),
    headPosition: async () => last,
    close: () => store.close(),
    subscribeToAll(options): Subscription {
      const inner = store.subscribeToAll(options);
      let closed = false;
      const close = async () => {
        if (closed) return;
        closed = true;
        await inner.close();
      };
      async function* items(): AsyncGenerator<SubscriptionItem> {
        try {
          for await (const item of inner) {
            if (item.kind === 'caughtUp') break;
            if (item.event.position > last) break;
            yield item;
          }
          yield { kind: 'caughtUp', position: last };
        } finally {
          await close();
        }
      }
      return { [Symbol.asyncIterator]: items, close };
    },
  };
}

/**
 * The live read models with the retention job's deletes applied in view only: deleted keys are
 * remembered and hidden from reads; nothing is written to the store.
 */
class RetentionView implements ReadModelStore {
  private readonly deleted = new Set<string>();

  constructor(private readonly inner: ReadModelStore) {}

  private hidden(collection: string, key: string): boolean {
    return this.deleted.has(`${collection}\0${key}`);
  }

  async get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    return this.hidden(collection, key) ? null : this.inner.get<T>(collection, key);
  }

  async range<T extends Doc = Doc>(collection: string, options: RangeOptions = {}): Promise<Array<{ key: string; doc: T }>> {
    const { limit } = options;
    const found: Array<{ key: string; doc: T }> = [];
    let page = options;
    for (;;) {
      const rows = await this.inner.range<T>(collection, page);
      for (const row of rows) if (!this.hidden(collection, row.key)) found.push(row);
      const last = rows[rows.length - 1];
      if (limit === undefined || rows.length < limit || !last || found.length >= limit) return limit === undefined ? found : found.slice(0, limit);
      page = options.reverse ? { ...options, lt: last.key } : { ...options, gte: `${last.key}\0` };
    }
  }

  async write(writes: ReadModelWrite[]): Promise<void> {
    for (const w of writes) {
      if (w.op !== 'delete') throw new Error('verify only deletes in view');
      this.deleted.add(`${w.collection}\0${w.key}`);
    }
  }

  checkpoint(projection: string): Promise<Position | null> {
    return this.inner.checkpoint(projection);
  }

  commit(): Promise<void> {
    throw new Error('verify does not project into the live read models');
  }

  reset(): Promise<void> {
    throw new Error('verify does not reset the live read models');
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
