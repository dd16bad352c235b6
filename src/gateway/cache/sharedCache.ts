import { createHash } from 'node:crypto';
import type { MaybePromise } from '../../domain/maybePromise.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient } from '../../infra/redis/client.js';
import type { SharedCacheCounts } from '../../infra/telemetry.js';

/**
 * The response cache's second level, shared by every gateway instance through Redis: answers
 * that can never change (what src/gateway/cache/rpcReads.ts `neverChanges` says), never the
 * ones kept for the current head. Looked up after an in-process miss within a short deadline,
 * written after a node's final answer without waiting; a slow, failing or absent Redis only
 * costs the lookups it lets through before they stop for a while (fail open: the node answers).
 */
export interface SharedCache {
  /**
   * The result kept under `key`, or undefined: a miss, a reply past the deadline, a failed
   * command, or a value that fails its check. Undefined at once, with no I/O, while lookups are
   * paused or the connection is not ready. Never rejects.
   */
  get(key: string): MaybePromise<string | undefined>;
  /** Keeps `resultText` under `key`; fire and forget, skipped while Redis is failing or too big. */
  set(key: string, resultText: string): void;
  /** How long a value lives (ms): what a gateway whose chain rewound final blocks waits out before using the level again. */
  readonly ttlMs: number;
  readonly stats: SharedCacheStats;
  close(): Promise<void>;
}

/** What it counts since start, as /metrics shows it. */
export type SharedCacheStats = SharedCacheCounts;

export interface SharedCacheOptions {
  /** How long a lookup may take before the call goes to the node without it. */
  deadlineMs?: number;
  /** How long a value lives in Redis. */
  ttlSeconds?: number;
  /** Larger results are not written (their lookups would be the slow ones). */
  maxValueChars?: number;
  /** Consecutive failed or late lookups that pause lookups. */
  failuresToPause?: number;
  /** How long lookups stay paused; then one lookup at a time tries Redis again. */
  pauseMs?: number;
  /** Writes not yet answered past which new ones are dropped (a hung Redis would hold them all). */
  maxPendingWrites?: number;
  now?: () => number;
}

/**
 * 10 ms: a Redis in the same network answers a GET in well under a millisecond; past 10 ms it is
 * in trouble, and the node's own 20–60 ms is what the call would have cost anyway.
 */
export const SHARED_DEADLINE_MS = 10;
/** An hour: final answers never change, so the TTL only bounds Redis's memory (docs/decisions.md). */
export const SHARED_TTL_SECONDS = 3600;
/** 256 KiB: a GET of that takes ~2 ms on 1 Gbit/s, within the deadline; bigger answers stay in process. */
export const SHARED_MAX_VALUE_CHARS = 256 * 1024;

const VERSION = '1';
/** Characters of the check before the result: base64url of 9 bytes of SHA-256. */
const TAG_CHARS = 12;

/**
 * The Redis key of a final call: `rc:<chain>:` and 128 bits of SHA-256 over the method and the
 * params in canonical form (JSON re-serialised: no whitespace, object members sorted by name,
 * hex strings in lower case; no params the same as `[]`), so the same call written differently
 * by different clients shares one value. Null when the params are not JSON.
 */
export function sharedKey(chainId: string, method: string, paramsText: string | undefined): string | null {
  let canonical: string;
  try {
    canonical = canonicalJson(paramsText === undefined ? [] : JSON.parse(paramsText));
  } catch {
    return null;
  }
  const digest = createHash('sha256').update(method).update('\u0000').update(canonical).digest();
  return `rc:${chainId}:${digest.subarray(0, 16).toString('base64url')}`;
}

const HEX = /^0x[0-9a-fA-F]*$/;

/** JSON text of `value` with object members sorted and hex strings lower-cased (EVM nodes read hex in either case). */
export function canonicalJson(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(HEX.test(value) ? value.toLowerCase() : value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const o = value as Record<string, unknown>;
    const names = Object.keys(o)
      .filter((name) => o[name] !== undefined)
      .sort();
    return `{${names.map((name) => `${JSON.stringify(name)}:${canonicalJson(o[name])}`).join(',')}}`;
  }
  // A number JSON.parse could not hold exactly (beyond 2^53, or beyond a double) would give two
  // different calls one key: such a call is not shared.
  if (typeof value === 'number' && (!Number.isFinite(value) || (Number.isInteger(value) && !Number.isSafeInteger(value)))) {
    throw new RangeError('a number JSON cannot hold exactly');
  }
  return JSON.stringify(value);
}

/** A value as written: version, a check binding the result to its key, the result's JSON text. */
export const sharedValue = (key: string, resultText: string): string => `${VERSION}${tagOf(key, resultText)}${resultText}`;

function tagOf(key: string, resultText: string): string {
  return createHash('sha256')
    .update(key)
    .update('\u0000')
    .update(resultText)
    .digest()
    .subarray(0, (TAG_CHARS * 3) / 4)
    .toString('base64url');
}

/** The result a value holds when it passes its check (written by sharedValue for this key), else null. */
export function resultOfValue(key: string, value: string): string | null {
  if (value.length <= 1 + TAG_CHARS || value[0] !== VERSION) return null;
  const resultText = value.slice(1 + TAG_CHARS);
  return tagOf(key, resultText) === value.slice(1, 1 + TAG_CHARS) ? resultText : null;
}

/** A lookup waiting for its reply or its deadline. */
interface Lookup {
  at: number;
  settled: boolean;
  resolve: (value: string | undefined) => void;
  probe: boolean;
}

/**
 * The shared cache over one Redis client (a server or a cluster). Deadlines share one timer:
 * every lookup has the same deadline, so the queue of lookups is in deadline order.
 */
export class RedisSharedCache implements SharedCache {
  readonly stats: SharedCacheStats = {
    hits: 0,
    misses: 0,
    late: 0,
    errors: 0,
    skipped: 0,
    rejected: 0,
    writes: 0,
    writeErrors: 0,
    writesSkipped: 0,
    pauses: 0,
  };
  private readonly deadlineMs: number;
  private readonly ttlSeconds: number;
  readonly ttlMs: number;
  private readonly maxValueChars: number;
  private readonly failuresToPause: number;
  private readonly pauseMs: number;
  private readonly maxPendingWrites: number;
  private readonly now: () => number;
  private readonly queue: Lookup[] = [];
  private queueHead = 0;
  private timer: NodeJS.Timeout | null = null;
  private consecutiveFailures = 0;
  /** Lookups are paused until then; after it, while `recovering`, one probe at a time goes. */
  private pausedUntil = 0;
  private recovering = false;
  private probing = false;
  private pendingWrites = 0;
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    options: SharedCacheOptions = {},
    private readonly ownsClient = false,
  ) {
    this.deadlineMs = options.deadlineMs ?? SHARED_DEADLINE_MS;
    this.ttlSeconds = options.ttlSeconds ?? SHARED_TTL_SECONDS;
    this.ttlMs = this.ttlSeconds * 1000;
    this.maxValueChars = options.maxValueChars ?? SHARED_MAX_VALUE_CHARS;
    this.failuresToPause = options.failuresToPause ?? 3;
    this.pauseMs = options.pauseMs ?? 1000;
    this.maxPendingWrites = options.maxPendingWrites ?? 1000;
    this.now = options.now ?? Date.now;
  }

  get(key: string): MaybePromise<string | undefined> {
    if (!this.mayAsk()) {
      this.stats.skipped++;
      return undefined;
    }
    const probe = this.recovering;
    if (probe) this.probing = true;
    return new Promise((resolve) => {
      const lookup: Lookup = { at: this.now() + this.deadlineMs, settled: false, resolve, probe };
      this.queue.push(lookup);
      this.arm();
      this.redis.get(key).then(
        (value) => this.answered(lookup, key, value),
        () => {
          if (lookup.settled) return;
          this.stats.errors++;
          this.settle(lookup, undefined, false);
        },
      );
    });
  }

  set(key: string, resultText: string): void {
    if (resultText.length > this.maxValueChars || this.recovering || this.pendingWrites >= this.maxPendingWrites || !this.ready()) {
      this.stats.writesSkipped++;
      return;
    }
    this.pendingWrites++;
    this.stats.writes++;
    this.redis.set(key, sharedValue(key, resultText), 'EX', this.ttlSeconds).then(
      () => {
        this.pendingWrites--;
      },
      () => {
        this.pendingWrites--;
        this.stats.writeErrors++;
      },
    );
  }

  private ready(): boolean {
    return !this.closed && this.redis.status === 'ready';
  }

  private mayAsk(): boolean {
    if (!this.ready()) return false;
    if (!this.recovering) return true;
    return this.now() >= this.pausedUntil && !this.probing;
  }

  private answered(lookup: Lookup, key: string, value: string | null): void {
    // Past its deadline the call went on without it; a late reply says nothing good of Redis.
    if (lookup.settled) return;
    if (value === null) {
      this.stats.misses++;
      this.settle(lookup, undefined, true);
      return;
    }
    const resultText = resultOfValue(key, value);
    if (resultText === null) this.stats.rejected++;
    else this.stats.hits++;
    this.settle(lookup, resultText ?? undefined, true);
  }

  private settle(lookup: Lookup, value: string | undefined, answered: boolean): void {
    lookup.settled = true;
    if (lookup.probe) this.probing = false;
    if (answered) {
      this.consecutiveFailures = 0;
      this.recovering = false;
    } else {
      this.consecutiveFailures++;
      if (lookup.probe || this.consecutiveFailures >= this.failuresToPause) {
        if (!this.recovering || lookup.probe) this.stats.pauses++;
        this.recovering = true;
        this.pausedUntil = this.now() + this.pauseMs;
      }
    }
    lookup.resolve(value);
  }

  /** One timer for the oldest unsettled lookup; judged after the poll phase (replies read first: src/infra/deadline.ts). */
  private arm(): void {
    if (this.timer !== null) return;
    this.dropSettled();
    const first = this.queue[this.queueHead];
    if (first === undefined) return;
    this.timer = setTimeout(
      () => {
        setImmediate(() => {
          this.timer = null;
          this.expire();
          this.arm();
        });
      },
      Math.max(0, first.at - this.now()),
    );
    this.timer.unref();
  }

  private expire(): void {
    const now = this.now();
    while (this.queueHead < this.queue.length) {
      const lookup = this.queue[this.queueHead] as Lookup;
      if (!lookup.settled && lookup.at > now) break;
      this.queueHead++;
      if (!lookup.settled) {
        this.stats.late++;
        this.settle(lookup, undefined, false);
      }
    }
    this.compact();
  }

  private dropSettled(): void {
    while (this.queueHead < this.queue.length && (this.queue[this.queueHead] as Lookup).settled) this.queueHead++;
    this.compact();
  }

  private compact(): void {
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    } else if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
      this.queue.splice(0, this.queueHead);
      this.queueHead = 0;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (let i = this.queueHead; i < this.queue.length; i++) {
      const lookup = this.queue[i] as Lookup;
      if (!lookup.settled) {
        lookup.settled = true;
        lookup.resolve(undefined);
      }
    }
    this.queue.length = 0;
    this.queueHead = 0;
    if (this.ownsClient) await closeClient(this.redis);
  }
}

/**
 * The shared cache on its own connection to `url` (one server or a cluster, src/infra/redis/client.ts):
 * commands fail at once while it is disconnected rather than wait in a queue.
 */
export function openSharedCache(url: string, options: SharedCacheOptions = {}): RedisSharedCache {
  return new RedisSharedCache(redisClient(url, FAIL_FAST), options, true);
}
