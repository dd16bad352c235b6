import { isErrorUsage, usedQuota } from '../domain/usage.js';
import { asUsageMonthClosed, type MonthCounts, USAGE_MONTH_CLOSED } from '../domain/usageSummary.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';
import { USAGE_EVENT_TYPES, usageRecordsOf } from './usageRecord.js';

export const USAGE_TOTALS = { byToken: 'token_month_usage', byAccount: 'account_month_usage' } as const;

/** `YYYY-MM` of an ISO time: the UTC billing month. */
export const monthOf = (iso: string): string => iso.slice(0, 7);
/** Joined, not a template literal: a flat string, cheaper for the read models to hash (see usageMetrics.ts). */
export const monthKey = (ownerId: string, month: string): string => [ownerId, month].join('/');

interface MonthFold {
  requests: number;
  errors: number;
  /** Calls that used no quota (refused, invalid): `requests` less these is the quota used. */
  uncharged: number;
  lastUsedAt: string;
}

/**
 * A month's document: every call (requests, errors) and the calls that used no quota. Counting
 * those, not the charged ones, keeps documents written before the split right: they simply
 * have none (`uncharged` absent).
 */
export type MonthTotals = {
  requests?: number;
  errors?: number;
  uncharged?: number;
  lastUsedAt?: string;
};

/** Requests that used quota in a month's document: what the limiter counted, and every figure of "used" shows. */
export const quotaUsed = (doc: MonthTotals | null): number => {
  const requests = typeof doc?.requests === 'number' && Number.isFinite(doc.requests) ? doc.requests : 0;
  const uncharged = typeof doc?.uncharged === 'number' && Number.isFinite(doc.uncharged) ? doc.uncharged : 0;
  return Math.max(0, requests - uncharged);
};

/** owner → month → counts; nested, so that a call builds no key. */
type Owners = Map<string, Map<string, MonthFold>>;

function count(owners: Owners, owner: string, month: string, failed: boolean, charged: boolean, at: string): void {
  let months = owners.get(owner);
  if (months === undefined) {
    months = new Map();
    owners.set(owner, months);
  }
  const fold = months.get(month);
  if (fold === undefined) months.set(month, { requests: 1, errors: failed ? 1 : 0, uncharged: charged ? 0 : 1, lastUsedAt: at });
  else {
    fold.requests++;
    if (failed) fold.errors++;
    if (!charged) fold.uncharged++;
    fold.lastUsedAt = at;
  }
}

/** The writes of a run of usage events, folded: one per token-month and per account-month, a later call's time winning. */
function projectTotals(events: readonly StoredEvent[]): ReadModelWrite[] {
  const tokens: Owners = new Map();
  const accounts: Owners = new Map();
  for (const stored of events) {
    for (const r of usageRecordsOf(stored)) {
      const failed = isErrorUsage(r);
      const charged = usedQuota(r);
      const month = monthOf(r.at);
      count(tokens, r.tokenId, month, failed, charged, r.at);
      count(accounts, r.accountId, month, failed, charged, r.at);
    }
  }
  const writes: ReadModelWrite[] = [];
  for (const [tokenId, months] of tokens) {
    for (const [month, { requests, errors, uncharged, lastUsedAt }] of months) {
      writes.push({ op: 'inc', collection: USAGE_TOTALS.byToken, key: monthKey(tokenId, month), inc: { requests, errors, uncharged }, set: { lastUsedAt } });
    }
  }
  for (const [accountId, months] of accounts) {
    for (const [month, { requests, errors, uncharged }] of months) {
      writes.push({ op: 'inc', collection: USAGE_TOTALS.byAccount, key: monthKey(accountId, month), inc: { requests, errors, uncharged } });
    }
  }
  return writes;
}

/*
 * Closed months (UsageMonthClosed, src/domain/usageSummary.ts): the month's documents are SET
 * to the summary, which copied them once the month was over. Live that writes what is there
 * already; in a rebuild whose log no longer holds the month's calls (retention dropped them) it
 * writes what they had counted. Calls of the month that come after the summary in the log
 * (later than its grace period) count on top, live and in a rebuild alike.
 */

/** The documents of a closed month (or of a part of one), as the summary holds them. */
function projectMonthClosed(stored: StoredEvent): ReadModelWrite[] {
  const summary = asUsageMonthClosed(stored.type, stored.data);
  if (summary === null) return [];
  const { accountId, month, account } = summary;
  const writes: ReadModelWrite[] = [{ op: 'put', collection: USAGE_TOTALS.byAccount, key: monthKey(accountId, month), doc: monthDoc(account) }];
  for (const token of summary.tokens) {
    const doc = monthDoc(token);
    if (token.lastUsedAt !== undefined) doc.lastUsedAt = token.lastUsedAt;
    writes.push({ op: 'put', collection: USAGE_TOTALS.byToken, key: monthKey(token.tokenId, month), doc });
  }
  return writes;
}

const monthDoc = ({ requests, errors, uncharged }: MonthCounts): MonthTotals =>
  uncharged === undefined ? { requests, errors } : { requests, errors, uncharged };

/** Usage events counted, closed months set, in log order: the runs of usage events between summaries fold as before. */
function projectTotalsAndClosedMonths(events: readonly StoredEvent[]): ReadModelWrite[] {
  if (!events.some((e) => e.type === USAGE_MONTH_CLOSED)) return projectTotals(events);
  const writes: ReadModelWrite[] = [];
  let from = 0;
  for (const [i, stored] of events.entries()) {
    if (stored.type !== USAGE_MONTH_CLOSED) continue;
    for (const w of projectTotals(events.slice(from, i))) writes.push(w);
    for (const w of projectMonthClosed(stored)) writes.push(w);
    from = i + 1;
  }
  for (const w of projectTotals(events.slice(from))) writes.push(w);
  return writes;
}

/** Requests, errors and quota used per token and per account per month, and each token's last use. */
export const usageTotalsProjection: Projection = {
  name: 'usage_totals',
  collections: Object.values(USAGE_TOTALS),
  eventTypes: new Set([...USAGE_EVENT_TYPES, USAGE_MONTH_CLOSED]),
  project: (stored) => projectTotalsAndClosedMonths([stored]),
  projectBatch: projectTotalsAndClosedMonths,
};
