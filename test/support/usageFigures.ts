import type { components } from '../../clients/typescript/schema.js';

/** The counts every `UsageFigures` of the metrics API carries (totals, byChain, byMethod, byToken, byMethodOther). */
export const COUNTS = ['requests', 'success', 'errors', 'cacheHits', 'coalesced', 'hedged'] as const;
export type Counts = Record<(typeof COUNTS)[number], number>;
type Figures = Pick<components['schemas']['UsageFigures'], keyof Counts>;

/** The counts of one entry. */
export const countsOf = (f: Figures): Counts => Object.fromEntries(COUNTS.map((k) => [k, f[k]])) as Counts;

/** The counts of a list of entries, summed: a breakdown's sums, to compare with the totals. */
export function sumCounts(list: readonly Figures[]): Counts {
  const out = Object.fromEntries(COUNTS.map((k) => [k, 0])) as Counts;
  for (const f of list) for (const k of COUNTS) out[k] += f[k];
  return out;
}

export const sumOf = <T>(list: readonly T[], pick: (x: T) => number): number => list.reduce((s, x) => s + pick(x), 0);
