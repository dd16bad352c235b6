import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { PlanCatalog } from '../domain/plans.js';
import type { EventStore, Position, Subscription, SubscriptionItem } from '../infra/eventstore/port.js';
import { LevelReadModelStore } from '../infra/readmodels/level.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from '../projections/core.js';
import type { Projection } from '../projections/projection.js';
import { purgeAccountUsage } from '../projections/retention.js';
import { ProjectionRunner } from '../projections/runner.js';

export interface Difference {
  collection: string;
  key: string;
  /** `missing`: the replay has the document, the read models do not; `extra`: the other way; `differs`: both, with these top-level fields unequal. */
  kind: 'missing' | 'extra' | 'differs';
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
          for await (const d of compare(collection, liveView, replay)) {
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
