import type { TokenRecord } from '../api/types.js';
import type { AccountDoc, TokenDoc } from '../projections/core.js';
import type { Queries } from '../projections/queries.js';
import type { AlertMetrics, UsageScope, WindowStats } from './alertMetrics.js';

/**
 * What one evaluation round reads, each thing once however many rules need it: an account, a
 * token, an account's tokens, a month's usage, and a window's figures per (account, token,
 * window). Rules on the same scope and window share one query; one that counts limit refusals
 * counts as many as the most any rule on that window needs (`needRefusals`, told before the
 * round reads), so the count is the same whichever rule reads first. Lives for one round: the
 * next reads afresh. Failures are kept too, so every rule that needs a failed read fails alike.
 */
export class RoundReads {
  private readonly memo = new Map<string, Promise<unknown>>();
  private readonly refusals = new Map<string, number>();

  constructor(
    private readonly queries: Queries,
    private readonly metrics: AlertMetrics,
    private readonly at: Date,
  ) {}

  private once<T>(key: string, read: () => Promise<T>): Promise<T> {
    let found = this.memo.get(key) as Promise<T> | undefined;
    if (!found) {
      found = read();
      found.catch(() => {}); // read by the rules that need it; not an unhandled rejection meanwhile
      this.memo.set(key, found);
    }
    return found;
  }

  private static windowKey(accountId: string, tokenId: string | null, from: Date, to: Date): string {
    return `${accountId}/${tokenId ?? '*'}/${from.getTime()}/${to.getTime()}`;
  }

  /** A rule on this window counts up to `count` refusals: its window's one query counts that many. */
  needRefusals(accountId: string, tokenId: string | null, from: Date, to: Date, count: number): void {
    const key = RoundReads.windowKey(accountId, tokenId, from, to);
    this.refusals.set(key, Math.max(this.refusals.get(key) ?? 0, count));
  }

  account(accountId: string): Promise<AccountDoc | null> {
    return this.once(`account/${accountId}`, () => this.queries.account(accountId));
  }

  tokenDoc(tokenId: string): Promise<TokenDoc | null> {
    return this.once(`token/${tokenId}`, () => this.queries.tokenDoc(tokenId));
  }

  tokens(accountId: string): Promise<TokenRecord[]> {
    return this.once(`tokens/${accountId}`, () => this.queries.tokens(accountId));
  }

  monthUsage(scope: UsageScope): Promise<number> {
    const key = 'tokenId' in scope ? `month/token/${scope.tokenId}` : `month/account/${scope.accountId}`;
    return this.once(key, () => this.metrics.monthUsage(scope, this.at));
  }

  windowStats(accountId: string, tokenId: string | null, from: Date, to: Date): Promise<WindowStats> {
    const key = RoundReads.windowKey(accountId, tokenId, from, to);
    return this.once(`window/${key}`, () => this.metrics.windowStats(accountId, tokenId, from, to, this.refusals.get(key) ?? 0));
  }
}
