import { z } from 'zod';
import { sha256Hex } from './sha256.js';

/**
 * A closed month of an account's usage: what outlives the calls themselves once retention drops
 * them from the log (docs/decisions.md, "Usage log retention"). Written once per account and
 * month, after the month ended and late records had time to arrive, to a stream that is never
 * truncated; the usage totals projection sets the month's documents to it, so a rebuild that no
 * longer sees the month's calls still has the month's totals.
 */
export const USAGE_MONTH_CLOSED = 'UsageMonthClosed';

/** The summaries of an account, one event per closed month (or a few parts of one, see `parts`). */
export const usageSummaryStream = (accountId: string): string => `usagesummary-${accountId}`;

const Count = z.number().int().nonnegative();

/** A month's counts as the usage totals keep them: every call, the failed ones, those that used no quota (absent in documents of earlier versions). */
export const MonthCounts = z.object({ requests: Count, errors: Count, uncharged: Count.optional() });
export type MonthCounts = z.infer<typeof MonthCounts>;

/** One chain and method of a token's month: [chain, method label, requests, errors]. */
export const ChainMethodCount = z.tuple([z.string(), z.string(), Count, Count]);
export type ChainMethodCount = z.infer<typeof ChainMethodCount>;

export const TokenMonth = MonthCounts.extend({
  tokenId: z.string().min(1),
  /** The token's last call of the month. */
  lastUsedAt: z.string().optional(),
  /** By chain and method, most requests first. */
  calls: z.array(ChainMethodCount),
});
export type TokenMonth = z.infer<typeof TokenMonth>;

export const UsageMonthClosedData = z.object({
  accountId: z.string().min(1),
  /** `YYYY-MM`, the UTC billing month. */
  month: z.string().regex(/^\d{4}-(0[1-9]|1[0-2])$/),
  /** The account's month. */
  account: MonthCounts,
  /** Each token with calls in the month (of this part). */
  tokens: z.array(TokenMonth),
  /**
   * Whether the chain and method counts cover every call of the month: false when the month's
   * roll-ups were no longer all there when it was closed (or a token's list was cut, see
   * SUMMARY_PART_BYTES). The totals are exact either way.
   */
  callsComplete: z.boolean(),
  /** A month of many tokens is written in parts (each under SUMMARY_PART_BYTES), tokens split among them. */
  part: z.number().int().nonnegative(),
  parts: z.number().int().positive(),
  /** When it was written. */
  closedAt: z.string(),
});
export type UsageMonthClosedData = z.infer<typeof UsageMonthClosedData>;

/** The JSON a part may take at most: a few parts fit one append (1 MiB in every store). */
export const SUMMARY_PART_BYTES = 256 * 1024;

/** The event id of a part of an account's month: deterministic, so the month is written once however often the job tries. */
export function usageMonthClosedId(accountId: string, month: string, part: number, generation = 0): string {
  // Generation 0 keeps the ids written before generations existed.
  const h = sha256Hex(`usage-month-closed:${accountId}:${month}:${part}${generation === 0 ? '' : `:g${generation}`}`);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The summary a stored event carries, or null when it is not a well-formed one. */
export function asUsageMonthClosed(type: string, data: Record<string, unknown>): UsageMonthClosedData | null {
  if (type !== USAGE_MONTH_CLOSED) return null;
  const parsed = UsageMonthClosedData.safeParse(data);
  return parsed.success ? parsed.data : null;
}

/** Start (epoch ms) of a `YYYY-MM` month, UTC. */
export const monthStartMs = (month: string): number => Date.UTC(Number(month.slice(0, 4)), Number(month.slice(5, 7)) - 1, 1);

/** `YYYY-MM` of the month after this one. */
export const nextMonth = (month: string): string => new Date(Date.UTC(Number(month.slice(0, 4)), Number(month.slice(5, 7)), 1)).toISOString().slice(0, 7);

/**
 * Splits a month's tokens over parts of at most SUMMARY_PART_BYTES of JSON. A token too large
 * for a part alone keeps its busiest chains and methods (and the month is marked incomplete).
 */
export function summaryParts(
  base: Omit<UsageMonthClosedData, 'tokens' | 'part' | 'parts' | 'callsComplete'>,
  tokens: TokenMonth[],
  callsComplete: boolean,
): UsageMonthClosedData[] {
  const budget = SUMMARY_PART_BYTES - JSON.stringify({ ...base, tokens: [], callsComplete, part: 0, parts: 0 }).length - 64;
  const groups: TokenMonth[][] = [[]];
  let used = 0;
  let complete = callsComplete;
  for (const token of tokens) {
    let fitted = token;
    let bytes = JSON.stringify(token).length + 1;
    while (bytes > budget && fitted.calls.length > 0) {
      fitted = { ...fitted, calls: fitted.calls.slice(0, Math.floor(fitted.calls.length / 2)) };
      bytes = JSON.stringify(fitted).length + 1;
      complete = false;
    }
    if (used + bytes > budget && (groups.at(-1)?.length ?? 0) > 0) {
      groups.push([]);
      used = 0;
    }
    groups.at(-1)?.push(fitted);
    used += bytes;
  }
  return groups.map((group, part) => ({ ...base, tokens: group, callsComplete: complete, part, parts: groups.length }));
}
