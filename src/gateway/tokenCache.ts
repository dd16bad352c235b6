import type { PlanId } from '../domain/plans.js';
import type { ChangeFeed } from '../infra/changefeed/port.js';
import type { MaybePromise } from '../infra/limits/port.js';
import type { TokenDoc } from '../projections/core.js';
import type { Queries } from '../projections/queries.js';
import { INVALIDATION_TOPIC } from '../projections/runner.js';

/** What the gateway needs of a token to admit a call: compact, so 100,000 of them fit easily. */
export interface CachedToken {
  tokenId: string;
  accountId: string;
  plan: PlanId;
  status: TokenDoc['status'];
  expiresAt: string | null;
  monthlyLimit: number | null;
  rateLimit: number | null;
}

const POSITIVE_TTL_MS = 60_000;
const NEGATIVE_TTL_MS = 2_000;
const NEGATIVE_MAX = 100_000;
/** Account ids kept for sharing between the tokens of an account; cleared beyond this many. */
const ACCOUNT_IDS_MAX = 100_000;

/**
 * A cache entry is the token itself plus its expiry: one object per token. The expiry is kept
 * in whole seconds since the cache started, which V8 stores inline (a small integer) where
 * epoch milliseconds would need a heap number of their own.
 */
class Entry implements CachedToken {
  constructor(
    readonly tokenId: string,
    readonly accountId: string,
    readonly plan: PlanId,
    readonly status: TokenDoc['status'],
    readonly expiresAt: string | null,
    readonly monthlyLimit: number | null,
    readonly rateLimit: number | null,
    /** Seconds since the cache's epoch after which the entry is stale. */
    readonly until: number,
  ) {}
}

/**
 * Token lookups by hash from the read models, cached in process. Every change to a token or an
 * account's plan arrives through the change feed and drops the entry at once; the TTL is only a
 * safety net for a lost notification (e.g. while Redis was away).
 */
export class TokenCache {
  private byHash = new Map<string, Entry>();
  private hashById = new Map<string, string>();
  private unknown = new Map<string, number>();
  /** One string per account id, shared by its tokens' entries (each read model lookup parses a new one). */
  private accountIds = new Map<string, string>();
  private unsubscribe: (() => Promise<void>) | null = null;
  private readonly epochMs: number;

  constructor(
    private readonly queries: Queries,
    private readonly now: () => number = Date.now,
  ) {
    this.epochMs = now();
  }

  async listen(feed: ChangeFeed): Promise<void> {
    this.unsubscribe = await feed.subscribe(INVALIDATION_TOPIC, (message) => this.invalidate(message));
  }

  /** `token:<id>` or `account:<id>`. */
  invalidate(message: string): void {
    const [kind, id] = message.split(':', 2) as [string, string];
    if (kind === 'token') {
      const hash = this.hashById.get(id);
      if (hash) this.byHash.delete(hash);
      this.hashById.delete(id);
      // A new token may have been looked up (and missed) before its creation reached us.
      this.unknown.clear();
    } else if (kind === 'account') {
      for (const [hash, entry] of this.byHash) {
        if (entry.accountId === id) {
          this.byHash.delete(hash);
          this.hashById.delete(entry.tokenId);
        }
      }
    }
  }

  get size(): number {
    return this.byHash.size;
  }

  /** The token if it is in the cache and fresh: only tokens that exist are ever there. */
  cached(tokenHash: string): CachedToken | undefined {
    const hit = this.byHash.get(tokenHash);
    return hit && hit.until > (this.now() - this.epochMs) / 1000 ? hit : undefined;
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
    const doc = await this.queries.tokenDocByHash(tokenHash);
    const account = doc ? await this.queries.account(doc.accountId) : null;
    if (!doc || !account) {
      if (this.unknown.size >= NEGATIVE_MAX) this.unknown.clear();
      this.unknown.set(tokenHash, t + NEGATIVE_TTL_MS);
      return null;
    }
    const until = Math.floor((t + POSITIVE_TTL_MS - this.epochMs) / 1000);
    const token = new Entry(doc.id, this.shared(doc.accountId), account.plan, doc.status, doc.expiresAt, doc.monthlyLimit, doc.rateLimit, until);
    this.byHash.set(tokenHash, token);
    this.hashById.set(token.tokenId, tokenHash);
    this.unknown.delete(tokenHash);
    return token;
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
