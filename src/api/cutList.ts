import type { MethodFigures, OtherMethods } from './types.js';

/** What a cut list leaves out, summed: how many entries, their requests and errors. */
export interface Others {
  count: number;
  requests: number;
  errors: number;
}

/**
 * The first `shown` entries of a list, and the rest summed with what the API itself left out past
 * its cap (`left`, e.g. `byMethodOther`), so that the rows shown and the rest add up to the
 * totals. `others` is null when nothing is left out. One rule for the dashboard and the PDF.
 */
export function cutList<T extends { requests: number; errors: number }>(
  entries: T[],
  left: Others | null,
  shown: number,
): { rows: T[]; others: Others | null } {
  const rest = entries.slice(shown);
  if (rest.length === 0 && left === null) return { rows: entries, others: null };
  return {
    rows: entries.slice(0, shown),
    others: {
      count: rest.length + (left?.count ?? 0),
      requests: rest.reduce((s, r) => s + r.requests, left?.requests ?? 0),
      errors: rest.reduce((s, r) => s + r.errors, left?.errors ?? 0),
    },
  };
}

/** `byMethod` cut to its first `shown`, the rest summed with `byMethodOther`. */
export const cutMethods = (byMethod: MethodFigures[], other: OtherMethods | null, shown: number) =>
  cutList(byMethod, other && { count: other.methods, requests: other.requests, errors: other.errors }, shown);
