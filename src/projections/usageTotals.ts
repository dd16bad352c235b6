import { isErrorUsage, USAGE_EVENT_TYPE, UsageRecord } from '../domain/usage.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';

export const USAGE_TOTALS = { byToken: 'token_month_usage', byAccount: 'account_month_usage' } as const;

/** `YYYY-MM` of an ISO time: the UTC billing month. */
export const monthOf = (iso: string): string => iso.slice(0, 7);
/** Joined, not a template literal: a flat string, cheaper for the read models to hash (see usageMetrics.ts). */
export const monthKey = (ownerId: string, month: string): string => [ownerId, month].join('/');

/** Requests and errors per token and per account per month, and each token's last use. */
export const usageTotalsProjection: Projection = {
  name: 'usage_totals',
  collections: Object.values(USAGE_TOTALS),
  project(stored: StoredEvent): ReadModelWrite[] {
    if (stored.type !== USAGE_EVENT_TYPE) return [];
    const parsed = UsageRecord.safeParse(stored.data);
    if (!parsed.success) return [];
    const r = parsed.data;
    const inc = { requests: 1, errors: isErrorUsage(r) ? 1 : 0 };
    const month = monthOf(r.at);
    return [
      { op: 'inc', collection: USAGE_TOTALS.byToken, key: monthKey(r.tokenId, month), inc, set: { lastUsedAt: r.at } },
      { op: 'inc', collection: USAGE_TOTALS.byAccount, key: monthKey(r.accountId, month), inc },
    ];
  },
};
