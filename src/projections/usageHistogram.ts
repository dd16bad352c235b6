/**
 * A fixed latency histogram (ms): roughly log-spaced upper bounds, 1-2-3-5-7 per decade, from
 * 1 ms to 60 s, plus an overflow bucket. Fixed so that counts from any documents add up, and
 * stored as one numeric field per bucket so the read-model `inc` can count into them. Changing
 * the bounds changes the meaning of stored counts: add new fields, never move old ones.
 */
export const LATENCY_BOUNDS_MS = [
  1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000, 7000, 10_000, 15_000, 20_000, 30_000, 60_000,
] as const;

/** Field names, one per bucket: `h<upper bound>` and `hInf` for the overflow. */
export const HISTOGRAM_FIELDS: readonly string[] = [...LATENCY_BOUNDS_MS.map((b) => `h${b}`), 'hInf'];

/** Index of the bucket a latency falls in: the first whose upper bound is ≥ the value. */
export function histogramIndex(ms: number): number {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= (LATENCY_BOUNDS_MS[i] as number)) return i;
  return LATENCY_BOUNDS_MS.length;
}

export const histogramField = (ms: number): string => HISTOGRAM_FIELDS[histogramIndex(ms)] as string;

/**
 * The q-quantile (0 < q ≤ 1) estimated from bucket counts, interpolating linearly inside the
 * bucket that holds it (as Prometheus' histogram_quantile does). Exact to within its bucket;
 * a value in the overflow bucket is reported as the last bound. Null when there are no counts.
 */
export function quantile(counts: readonly number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i] as number;
    if (c > 0 && below + c >= rank) {
      const upper = LATENCY_BOUNDS_MS[i];
      const lower = i === 0 ? 0 : (LATENCY_BOUNDS_MS[i - 1] as number);
      if (upper === undefined) return lower;
      return lower + (upper - lower) * ((rank - below) / c);
    }
    below += c;
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1] as number;
}
