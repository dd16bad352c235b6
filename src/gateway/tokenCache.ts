import type { MaybePromise } from '../domain/maybePromise.js';
import { type ChangeFeed, FEED_RESUMED } from '../infra/changefeed/port.js';
import type { Queries } from '../projections/queries.js';
import { INVALIDATION_TOPIC } from '../projections/runner.js';
import { type CachedToken, TokenTable } from './tokenTable.js';

/** What the cache reads on a miss (Queries has it). */
export type TokenLookups = Pick<Queries, 'tokenDocByHash' | 'account'>;

const POSITIVE_TTL_MS = 60_000;
/**
 * A token not called for this long after its entry went stale is dropped, at the next miss
 * after as long again: the cache holds the tokens called lately, not every token called since
 * the process started.
 */
const SWEEP_AFTER_MS = 60_000;
/** Entries one sweep drops at most (~0.9 µs each, so a pause of ~10 ms); the next miss a second later goes on. */
const SWEEP_MAX = 10_000;
const NEGATIVE_TTL_MS = 2_000;
const NEGATIVE_MAX = 100_000;
/** Account ids kept for sharing between the tokens of an account; cleared beyond this many. */
const ACCOUNT_IDS_MAX = 100_000;

/**
 * Token lookups by hash from the read models, cached in process. Every change to a token or an
 * account's plan arrives through the change feed and drops the entry at once; when the feed may
 * have lost some (its Redis connection came back, or a cluster's subscriber moved) it drops them
 * all; the TTL is only a safety net for a lost notification the feed cannot tell of.
 */
export class TokenCache {
  /** The tokens, by hash; their expiry in whole seconds since the cache started (epochMs). */
  private table = new TokenTable();
  private unknown = new Map<string, number>();
  /** One string per account id, shared by its tokens' entries (each read model lookup parses a new one). */
  private accountIds = new Map<string, string>();
  private unsubscribe: (() => Promise<void>) | null = null;
  private readonly epochMs: number;
  /**
   * Invalidations received so far. A lookup that was reading the read model while one arrived
   * may have read what the change replaced (a revoked token as still active), so it caches
   * nothing: the next call reads again.
   */
  private invalidations = 0;
  /** When the last sweep of stale entries ran (ms on `now`). */
  private sweptAt: number;

  constructor(
    private readonly queries: TokenLookups,
    private readonly now: () => number = Date.now,
  ) {
    this.epochMs = now();
    this.sweptAt = this.epochMs;
  }

  async listen(feed: ChangeFeed): Promise<void> {
    this.unsubscribe = await feed.subscribe(INVALIDATION_TOPIC, (message) => this.invalidate(message));
  }

  /** `token:<id>` or `account:<id>`; FEED_RESUMED (changes may have been lost) drops every entry. */
  invalidate(message: string): void {
    this.invalidations++;
    if (message === FEED_RESUMED) {
      this.table = new TokenTable();
      this.unknown.clear();
      return;
    }
    const [kind, id] = message.split(':', 2) as [string, string];
    if (kind === 'token') {
      this.table.deleteById(id);
      // A new token may have been looked up (and missed) before its creation reached us.
      this.unknown.clear();
    } else if (kind === 'account') {
      this.table.deleteAccount(id);
    }
  }

  get size(): number {
    return this.table.size;
  }

  /** The token if it is in the cache and fresh: only tokens that exist are ever there. */
  cached(tokenHash: string): CachedToken | undefined {
    const hit = this.table.get(tokenHash);
    return hit && hit.until > this.secondsAt(this.now()) ? hit : undefined;
  }

  /** At once for a token in the cache (or known to be unknown); otherwise after reading the read model. */
  get(tokenHash: string): MaybePromise<CachedToken | null> {
    const hit = this.cached(tokenHash);
    if (hit) return hit;
    const t = this.now();
    const missUntil = this.unknown.get(tokenHash);
    if (missUntil !== undefined && missUntil > t) return null;
    return this.load(tokenHash, t);
  }

  private async load(tokenHash: string, t: number): Promise<CachedToken | null> {
    if (t - this.sweptAt >= SWEEP_AFTER_MS) this.sweep(t);
    const invalidationsBefore = this.invalidations;
    const doc = await this.queries.tokenDocByHash(tokenHash);
    const account = doc ? await this.queries.account(doc.accountId) : null;
    const current = this.invalidations === invalidationsBefore;
    if (!doc || !account) {
      if (current) {
        if (this.unknown.size >= NEGATIVE_MAX) this.unknown.clear();
        this.unknown.set(tokenHash, t + NEGATIVE_TTL_MS);
      }
      return null;
    }
    const until = this.secondsAt(t + POSITIVE_TTL_MS);
    const token: CachedToken = {
      tokenId: doc.id,
      accountId: this.shared(doc.accountId),
      plan: account.plan,
      status: doc.status,
      expiresAt: doc.expiresAt,
      monthlyLimit: doc.monthlyLimit,
      rateLimit: doc.rateLimit,
    };
    if (current) this.table.set(tokenHash, token, until);
    this.unknown.delete(tokenHash);
    return token;
  }

  /** Drops the entries stale for SWEEP_AFTER_MS or more (a scan of the table, on a miss, once a minute while there are few to drop). */
  private sweep(t: number): void {
    const dropped = this.table.deleteExpired(this.secondsAt(t - SWEEP_AFTER_MS), SWEEP_MAX);
    this.sweptAt = dropped < SWEEP_MAX ? t : t - SWEEP_AFTER_MS + 1000;
  }

  /** A time (ms on `now`) as the table keeps expiries: whole seconds since the cache started. */
  private secondsAt(ms: number): number {
    return Math.floor((ms - this.epochMs) / 1000);
  }

  private shared(accountId: string): string {
    const known = this.accountIds.get(accountId);
    if (known !== undefined) return known;
    if (this.accountIds.size >= ACCOUNT_IDS_MAX) this.accountIds.clear();
    this.accountIds.set(accountId, accountId);
    return accountId;
  }

  async close(): Promise<void> {
    await this.unsubscribe?.();
  }
}
