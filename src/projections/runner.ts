import type { ChangeFeed } from '../infra/changefeed/port.js';
import type { EventStore, Position, StoredEvent, Subscription, SubscriptionItem } from '../infra/eventstore/port.js';
import type { ReadModelStore, ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';

export const INVALIDATION_TOPIC = 'invalidate';

/**
 * Live, a batch is committed when full, or FLUSH_MS after its first event (`lingering.ms` while
 * all its events are of `lingering.types`), whichever comes first.
 */
const LIVE_BATCH_MAX = 5000;
const FLUSH_MS = 5;
/**
 * While catching up (a restart, a rebuild) the log is read back to back: a batch is committed
 * when full or at the head, with no timer raced against every event, and batches are larger,
 * so the roll-ups of many events fold into one read and one write per key.
 */
const CATCH_UP_BATCH_MAX = 5000;

/** Events whose batches may wait `ms` for more before they are committed (ProjectionRunner). */
export interface Lingering {
  types: ReadonlySet<string>;
  ms: number;
}

const NO_LINGERING: Lingering = { types: new Set(), ms: FLUSH_MS };

/** What the rest of a process uses of its projector, whether it runs on this thread or on the storage thread. */
export interface Projector {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Resolves once every projection has applied the event at `position` (read-your-writes). */
  waitFor(position: Position, timeoutMs?: number): Promise<void>;
  /** Resolves once the projections have caught up with the log as it was at start. */
  readonly caughtUp: Promise<void>;
  readonly isCaughtUp: boolean;
  /** How old the newest applied event was when it was applied, in ms (the projection lag). */
  readonly lastLagMs: number | null;
}

/**
 * Acts on events of some types once their batch is committed, before its change notifications go
 * out (Redis's account counts at a plan change: src/infra/limits/planChange.ts). Not a projection:
 * what it does is outside the read models, so it must be idempotent (a replay hands it the events
 * again) and handle its own failures.
 */
export interface CommitFollower {
  readonly types: ReadonlySet<string>;
  committed(events: readonly StoredEvent[]): Promise<void>;
}

/**
 * Follows the log from the oldest checkpoint of its projections, commits each batch per
 * projection with that projection's checkpoint, then publishes change notifications. A crash
 * between commits is harmless: each projection skips what its checkpoint already covers.
 */
export class ProjectionRunner implements Projector {
  private subscription: Subscription | null = null;
  private processed: Position | null = null;
  private checkpoints = new Map<string, Position | null>();
  private waiters: Array<{ position: Position; resolve: () => void }> = [];
  private caughtUpOnce = false;
  private caughtUpResolve!: () => void;
  private loop: Promise<void> | null = null;
  private failureHandler: ((error: Error) => void) | null = null;
  private follower: CommitFollower | null = null;
  /** The batch being committed while the next one is read and projected; at most one. */
  private committing: Promise<void> | null = null;
  /** Resolves once the projections have caught up with the log as it was at start. */
  readonly caughtUp: Promise<void> = new Promise((r) => {
    this.caughtUpResolve = r;
  });
  lastError: unknown = null;
  /** How old the newest applied event was when it was applied, in ms (the projection lag). */
  lastLagMs: number | null = null;

  constructor(
    private readonly store: EventStore,
    private readonly readModels: ReadModelStore,
    private readonly projections: Projection[],
    private readonly feed: ChangeFeed | null = null,
    /** Epoch ms: writes whose `expiresAt` is not after it are not applied. */
    private readonly now: () => number = Date.now,
    /**
     * Live events that nobody waits for, whose batch may gather more of them for a while: each
     * document they touch is then written once for more of them (see startProjecting).
     */
    private readonly lingering: Lingering = NO_LINGERING,
  ) {}

  /**
   * Who hears of the loop's failure (a store error it could not read or commit past). Without one
   * the failure is an unhandled rejection, which stops the process for its supervisor to restart.
   */
  onFailure(handler: (error: Error) => void): void {
    this.failureHandler = handler;
  }

  /** Who acts on a committed batch's events of its types (see CommitFollower). */
  follow(follower: CommitFollower): void {
    this.follower = follower;
  }

  get isCaughtUp(): boolean {
    return this.caughtUpOnce;
  }

  get position(): Position | null {
    return this.processed;
  }

  async start(): Promise<void> {
    for (const p of this.projections) this.checkpoints.set(p.name, await this.readModels.checkpoint(p.name));
    const all = [...this.checkpoints.values()];
    const from = all.some((c) => c === null) ? undefined : all.reduce<Position | null>((min, c) => (min === null || (c as Position) < min ? c : min), null);
    this.processed = from ?? null;
    const subscription = this.store.subscribeToAll(from ? { after: from } : {});
    this.subscription = subscription;
    this.loop = this.run(subscription);
    const handler = this.failureHandler;
    if (handler) this.loop.catch((error: unknown) => handler(error instanceof Error ? error : new Error(String(error))));
  }

  private async run(subscription: Subscription): Promise<void> {
    const batch: StoredEvent[] = [];
    const iterator = subscription[Symbol.asyncIterator]();
    let pending: Promise<IteratorResult<SubscriptionItem>> | null = null;
    // Live, one timer per batch (not per event).
    const deadline = new BatchDeadline();
    try {
      for (;;) {
        pending ??= iterator.next();
        const next = await deadline.cutShort(pending);
        if (next === null) {
          deadline.clear();
          await this.commit(batch.splice(0));
          await this.settle();
          continue;
        }
        pending = null;
        if (next.done) break;
        const item = next.value;
        if (item.kind === 'event') {
          batch.push(item.event);
          if (this.caughtUpOnce) deadline.arm(this.lingering.types.has(item.event.type) ? this.lingering.ms : FLUSH_MS);
          if (batch.length >= (this.caughtUpOnce ? LIVE_BATCH_MAX : CATCH_UP_BATCH_MAX)) {
            deadline.clear();
            // Not settled: the store writes this batch while the next one is read and projected.
            await this.commit(batch.splice(0));
          }
        } else {
          deadline.clear();
          await this.commit(batch.splice(0));
          await this.settle();
          if (!this.caughtUpOnce) {
            this.caughtUpOnce = true;
            this.caughtUpResolve();
          }
        }
      }
      await this.commit(batch.splice(0));
      await this.settle();
    } catch (e) {
      this.lastError = e;
      await this.committing?.catch(() => undefined);
      throw e;
    } finally {
      deadline.clear();
    }
  }

  /**
   * Projects the events and starts committing them (each projection's writes with its
   * checkpoint), once the previous batch is committed. Resolves when the commit has started.
   */
  private async commit(events: StoredEvent[]): Promise<void> {
    const last = events[events.length - 1];
    if (!last) return;
    const messages: string[] = [];
    const nowMs = this.now();
    const writesByProjection = this.projections.map((p) => {
      const checkpoint = this.checkpoints.get(p.name) ?? null;
      const types = p.eventTypes;
      const mine =
        types === undefined && checkpoint === null
          ? events
          : events.filter((e) => (types === undefined || types.has(e.type)) && (checkpoint === null || e.position > checkpoint));
      if (p.notifications) for (const e of mine) for (const m of p.notifications(e)) messages.push(m);
      if (p.projectBatch) return unexpired(p.projectBatch(mine, nowMs), nowMs);
      const writes: ReadModelWrite[] = [];
      for (const e of mine) for (const w of p.project(e)) writes.push(w);
      return unexpired(writes, nowMs);
    });
    const follower = this.follower;
    const followed = follower === null ? [] : events.filter((e) => follower.types.has(e.type));
    await this.settle();
    const committing = this.apply(last, writesByProjection, messages, followed);
    committing.catch(() => undefined); // awaited by the next settle(); not an unhandled rejection meanwhile
    this.committing = committing;
  }

  /** Waits for the batch being committed; rethrows its failure. */
  private async settle(): Promise<void> {
    const committing = this.committing;
    this.committing = null;
    await committing;
  }

  private async apply(last: StoredEvent, writesByProjection: ReadModelWrite[][], messages: string[], followed: StoredEvent[]): Promise<void> {
    for (const [i, p] of this.projections.entries()) {
      await this.readModels.commit(p.name, last.position, writesByProjection[i] ?? []);
      this.checkpoints.set(p.name, last.position);
    }
    // Before the notifications: a gateway that hears of the change finds what follows it done.
    if (followed.length > 0) await this.follower?.committed(followed).catch(() => undefined);
    this.processed = last.position;
    this.lastLagMs = Math.max(0, Date.now() - Date.parse(last.created));
    if (this.feed) {
      try {
        for (const m of new Set(messages)) await this.feed.publish(INVALIDATION_TOPIC, m);
      } catch {
        // Redis is away: the rest of the batch's notifications would fail the same way. The batch
        // is committed, so a failure here must not stop the projector (it would not publish them
        // after a restart either); the gateways, whose subscriptions dropped too, drop their
        // token caches once they are back on Redis (FEED_RESUMED).
      }
    }
    this.waiters = this.waiters.filter((w) => {
      if (w.position > last.position) return true;
      w.resolve();
      return false;
    });
  }

  /** Resolves once every projection has applied the event at `position` (read-your-writes). */
  waitFor(position: Position, timeoutMs = 5000): Promise<void> {
    if (this.processed !== null && this.processed >= position) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`projections did not reach ${position} within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({
        position,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  async stop(): Promise<void> {
    await this.subscription?.close();
    await this.loop?.catch(() => undefined);
  }
}

/**
 * A live batch's deadline: armed by its events, it cuts short the wait for the next item once it
 * has passed. One waiter per wait, woken by the timer: `Promise.race` against one promise per
 * batch instead left a reaction on that promise per event until the timer fired (~0.6 µs an
 * event more on the storage thread, measured in a loop).
 */
export class BatchDeadline {
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** The delay the running timer was set with, and when it fires (performance.now()). */
  private armedMs = 0;
  private at = 0;
  private passed = false;
  private wake: ((value: null) => void) | null = null;

  /** Makes the deadline `ms` from now, unless it is sooner already (or has passed). */
  arm(ms: number): void {
    if (this.passed) return;
    if (this.timer !== null) {
      // Set earlier with no longer a delay: sooner already, without reading the clock (every event arms it).
      if (ms >= this.armedMs) return;
      const at = performance.now() + ms;
      if (at >= this.at) return;
      clearTimeout(this.timer);
    }
    this.armedMs = ms;
    this.at = performance.now() + ms;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.passed = true;
      this.wake?.(null);
    }, ms);
  }

  /** Stops the clock and forgets that it ran out. */
  clear(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.passed = false;
    this.wake = null;
  }

  /** What `next` gives, or null once the deadline has passed first (`next` is then still to be awaited). */
  cutShort<T>(next: Promise<T>): Promise<T | null> {
    if (this.passed) return Promise.resolve(null);
    if (this.timer === null) return next;
    return new Promise<T | null>((resolve, reject) => {
      this.wake = resolve;
      next.then(resolve, reject);
    });
  }
}

/**
 * The writes of documents that have not expired at `nowMs`. One that has (a rebuild replaying
 * calls older than their retention, minute roll-ups after a week: see granularityRetention)
 * would only be deleted again by the store's TTL or the retention job; skipped, a rebuild of a
 * long history writes far fewer documents.
 */
export function unexpired(writes: ReadModelWrite[], nowMs: number): ReadModelWrite[] {
  const live = (w: ReadModelWrite): boolean => w.op === 'delete' || w.expiresAt === undefined || w.expiresAt > nowMs;
  // Most batches have nothing expired: no copy of them.
  return writes.every(live) ? writes : writes.filter(live);
}
