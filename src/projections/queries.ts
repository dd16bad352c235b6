import type { AccessTokenRecord, TokenRecord } from '../api/types.js';
import { effectiveStatus } from '../domain/apiToken.js';
import type { PlanCatalog } from '../domain/plans.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import { type AccessTokenDoc, type AccountDoc, COLLECTIONS as C, type TokenDoc } from './core.js';
import { type MonthTotals, monthKey, monthOf, quotaUsed, USAGE_TOTALS } from './usageTotals.js';

/**
 * Reads over the read models for the management API, the gatekeeper and the CLI. Token and
 * access-token documents become the API's records (src/api/types.ts) here and nowhere else.
 */
export class Queries {
  constructor(
    private readonly rm: ReadModelStore,
    private readonly now: () => Date = () => new Date(),
  ) {}

  account(accountId: string): Promise<AccountDoc | null> {
    return this.rm.get<AccountDoc>(C.accounts, accountId);
  }

  /**
   * Every charged request of the account's tokens this month (the account view's `requests`).
   * Not what counts against its monthly limit when tokens have their own: see accountQuotaUsage.
   */
  async accountMonthUsage(accountId: string, month = monthOf(this.now().toISOString())): Promise<number> {
    return quotaUsed(await this.rm.get<MonthTotals>(USAGE_TOTALS.byAccount, monthKey(accountId, month)));
  }

  /**
   * What a limiter bucket (quotaBucket) used in the month of `nowMs`, from the usage totals: a
   * token with its own limit its calls; an account the calls of its tokens without one (on a
   * plan with custom limits, its other tokens count apart). A token given its own limit during
   * the month counts apart for the whole month here.
   */
  async bucketMonthUsage(bucket: string, nowMs: number, plans: PlanCatalog): Promise<number> {
    const month = monthOf(new Date(nowMs).toISOString());
    if (bucket.startsWith('token:')) return this.tokenMonthUsage(bucket.slice('token:'.length), month);
    if (!bucket.startsWith('account:')) return 0;
    return this.accountQuotaUsage(bucket.slice('account:'.length), plans, month);
  }

  /**
   * Requests of the month that count against the account's monthly limit: on a plan with custom
   * limits, a token with its own limit counts apart (spec: Authentication 6). The limiter's
   * account bucket, and every account figure of quota used: the account view's remaining, the
   * metrics' limits, the PDF export, usage_threshold alerts, the CLI's `accounts show`.
   */
  async accountQuotaUsage(accountId: string, plans: PlanCatalog, month = monthOf(this.now().toISOString())): Promise<number> {
    const [used, account] = await Promise.all([this.accountMonthUsage(accountId, month), this.account(accountId)]);
    if (!account || !plans[account.plan]?.custom_limits) return used;
    const ids = await this.tokenIdsWithOwnMonthlyLimit(accountId);
    const apart = await Promise.all(ids.map((id) => this.tokenMonthUsage(id, month)));
    return Math.max(0, used - apart.reduce((sum, n) => sum + n, 0));
  }

  /**
   * The account's tokens with their own monthly limit, whatever their status: on a plan with
   * custom limits they count apart from the account (accountQuotaUsage), and a plan change that
   * turns custom limits off or on moves their months into or out of Redis's account bucket.
   */
  async tokenIdsWithOwnMonthlyLimit(accountId: string): Promise<string[]> {
    const refs = await this.rm.range<{ tokenId: string }>(C.tokensByAccount, { prefix: `${accountId}/` });
    const docs = await Promise.all(refs.map((r) => this.tokenDoc(r.doc.tokenId)));
    return docs.filter((d): d is TokenDoc => d !== null && d.monthlyLimit !== null).map((d) => d.id);
  }

  /** Requests of the month that used the token's quota (its own limit's, or the account's share). */
  async tokenMonthUsage(tokenId: string, month = monthOf(this.now().toISOString())): Promise<number> {
    return quotaUsed(await this.rm.get<MonthTotals>(USAGE_TOTALS.byToken, monthKey(tokenId, month)));
  }

  tokenDoc(tokenId: string): Promise<TokenDoc | null> {
    return this.rm.get<TokenDoc>(C.tokens, tokenId);
  }

  async tokenDocByHash(tokenHash: string): Promise<TokenDoc | null> {
    const ref = await this.rm.get<{ tokenId: string }>(C.tokensByHash, tokenHash);
    return ref ? this.tokenDoc(ref.tokenId) : null;
  }

  /** The account's token, or null when it does not exist or belongs to another account. */
  async token(accountId: string, tokenId: string): Promise<TokenRecord | null> {
    const doc = await this.tokenDoc(tokenId);
    return doc && doc.accountId === accountId ? this.tokenRecord(doc) : null;
  }

  async tokens(accountId: string): Promise<TokenRecord[]> {
    const refs = await this.rm.range<{ tokenId: string }>(C.tokensByAccount, { prefix: `${accountId}/` });
    const docs = await Promise.all(refs.map((r) => this.tokenDoc(r.doc.tokenId)));
    const records = await Promise.all(docs.filter((d): d is TokenDoc => d !== null).map((d) => this.tokenRecord(d)));
    return records.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }

  async tokenRecord(doc: TokenDoc): Promise<TokenRecord> {
    const nowIso = this.now().toISOString();
    const usage = await this.rm.get<MonthTotals>(USAGE_TOTALS.byToken, monthKey(doc.id, monthOf(nowIso)));
    const lastUsed = usage?.lastUsedAt ?? (await this.lastUsedBefore(doc.id));
    return {
      id: doc.id,
      name: doc.name,
      description: doc.description,
      status: effectiveStatus(doc, nowIso),
      masked: doc.masked,
      created_at: doc.createdAt,
      last_used_at: lastUsed,
      current_month_usage: quotaUsed(usage),
      expires_at: doc.expiresAt,
      monthly_limit: doc.monthlyLimit,
      rate_limit: doc.rateLimit,
    };
  }

  /** Last use in an earlier month, when the token has not been used this month. */
  private async lastUsedBefore(tokenId: string): Promise<string | null> {
    const [latest] = await this.rm.range<{ lastUsedAt: string }>(USAGE_TOTALS.byToken, { prefix: `${tokenId}/`, reverse: true, limit: 1 });
    return latest?.doc.lastUsedAt ?? null;
  }

  /** Tokens whose expiration has passed but that are not yet marked expired (for the scheduler). */
  async tokensPastExpiry(limit = 500): Promise<TokenDoc[]> {
    const refs = await this.rm.range<{ tokenId: string }>(C.tokensByExpiry, { lt: `${this.now().toISOString()}/\uffff` });
    const docs = await Promise.all(refs.map((r) => this.tokenDoc(r.doc.tokenId)));
    return docs.filter((d): d is TokenDoc => d !== null && (d.status === 'active' || d.status === 'disabled')).slice(0, limit);
  }

  async accessTokenByHash(tokenHash: string): Promise<AccessTokenDoc | null> {
    const ref = await this.rm.get<{ accessTokenId: string }>(C.accessTokensByHash, tokenHash);
    return ref ? this.rm.get<AccessTokenDoc>(C.accessTokens, ref.accessTokenId) : null;
  }

  async accessTokens(accountId: string): Promise<AccessTokenRecord[]> {
    const refs = await this.rm.range<{ accessTokenId: string }>(C.accessTokensByAccount, { prefix: `${accountId}/` });
    const docs = await Promise.all(refs.map((r) => this.rm.get<AccessTokenDoc>(C.accessTokens, r.doc.accessTokenId)));
    return docs
      .filter((d): d is AccessTokenDoc => d !== null)
      .map((d) => ({ id: d.id, name: d.name, masked: d.masked, status: d.status, created_at: d.createdAt }))
      .sort((a, b) => a.created_at.localeCompare(b.created_at));
  }
}
