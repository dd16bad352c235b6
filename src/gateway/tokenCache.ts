import type { PlanId } from '../domain/plans.js';
import type { ChangeFeed } from '../infra/changefeed/port.js';
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

/**
 * Token lookups by hash from the read models, cached in process. Every change to a token or an
 * account's plan arrives through the change feed and drops the entry at once; the TTL is only a
 * safety net for a lost notification (e.g. while Redis was away).
 */
export class TokenCache {
  private byHash = new Map<string, { token: CachedToken; until: number }>();
  private hashById = new Map<string, string>();
  private unknown = new Map<string, number>();
  private unsubscribe: (() => Promise<void>) | null = null;

  constructor(
    private readonly queries: Queries,
    private readonly now: () => number = Date.now,
  ) {}

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
        if (entry.token.accountId === id) {
          this.byHash.delete(hash);
          this.hashById.delete(entry.token.tokenId);
        }
      }
    }
  }

  get size(): number {
    return this.byHash.size;
  }

  async get(tokenHash: string): Promise<CachedToken | null> {
    const t = this.now();
    const hit = this.byHash.get(tokenHash);
    if (hit && hit.until > t) return hit.token;
    const missUntil = this.unknown.get(tokenHash);
    if (missUntil !== undefined && missUntil > t) return null;

    const doc = await this.queries.tokenDocByHash(tokenHash);
    const account = doc ? await this.queries.account(doc.accountId) : null;
    if (!doc || !account) {
      if (this.unknown.size >= NEGATIVE_MAX) this.unknown.clear();
      this.unknown.set(tokenHash, t + NEGATIVE_TTL_MS);
      return null;
    }
    const token: CachedToken = {
      tokenId: doc.id, accountId: doc.accountId, plan: account.plan, status: doc.status,
      expiresAt: doc.expiresAt, monthlyLimit: doc.monthlyLimit, rateLimit: doc.rateLimit,
    };
    this.byHash.set(tokenHash, { token, until: t + POSITIVE_TTL_MS });
    this.hashById.set(token.tokenId, tokenHash);
    this.unknown.delete(tokenHash);
    return token;
  }

  async close(): Promise<void> {
    await this.unsubscribe?.();
  }
}
