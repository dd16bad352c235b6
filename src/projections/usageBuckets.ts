/**
 * Time buckets of the usage roll-ups (UTC): a bucket is named by the prefix of its start's ISO
 * string, so bucket names sort like times and a time range is a key range.
 */
export const GRANULARITIES = ['minute', 'hour', 'day', 'month'] as const;
export type Granularity = (typeof GRANULARITIES)[number];
/** The granularities a metrics series is drawn at (months are for long-term totals only). */
export type SeriesGranularity = Exclude<Granularity, 'month'>;

export const MINUTE_MS = 60_000;
export const HOUR_MS = 60 * MINUTE_MS;
export const DAY_MS = 24 * HOUR_MS;

const FIXED_MS: Record<SeriesGranularity, number> = { minute: MINUTE_MS, hour: HOUR_MS, day: DAY_MS };
/** Length of the ISO prefix that names a bucket: `2024-05-01T13:45`, `2024-05-01T13`, `2024-05-01`, `2024-05`. */
const NAME_LENGTH: Record<Granularity, number> = { minute: 16, hour: 13, day: 10, month: 7 };
const FINER: Record<Exclude<SeriesGranularity, 'minute'>, SeriesGranularity> = { hour: 'minute', day: 'hour' };

const mod = (a: number, b: number): number => ((a % b) + b) % b;

/** Start (epoch ms) of the bucket holding `t`. */
export function floorTo(t: number, g: Granularity): number {
  if (g === 'month') {
    const d = new Date(t);
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  }
  return t - mod(t, FIXED_MS[g]);
}

/** Start of the bucket after the one starting at `bucketStart`. */
export function nextBucket(bucketStart: number, g: Granularity): number {
  if (g === 'month') {
    const d = new Date(bucketStart);
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  }
  return bucketStart + FIXED_MS[g];
}

/** `t` itself when it starts a bucket, else the start of the next bucket. */
export function ceilTo(t: number, g: Granularity): number {
  const f = floorTo(t, g);
  return f === t ? t : nextBucket(f, g);
}

/**
 * The name of the bucket holding the time whose `toISOString()` is `iso`: its prefix, since
 * flooring a time to a bucket start only zeroes the fields after that prefix.
 */
export const bucketNameOfIso = (iso: string, g: Granularity): string => iso.slice(0, NAME_LENGTH[g]);

/** The name of the bucket holding `t` (ms) — the key segment of roll-up documents. */
export const bucketName = (t: number, g: Granularity): string => bucketNameOfIso(new Date(t).toISOString(), g);

/** Parses a bucket name back to its start (epoch ms). */
export function bucketStart(name: string): number {
  const iso = name.length === 7 ? `${name}-01T00:00:00Z` : name.length === 10 ? `${name}T00:00:00Z` : name.length === 13 ? `${name}:00:00Z` : `${name}:00Z`;
  return Date.parse(iso);
}

/**
 * The series granularity for a range: a minute up to 6 hours, an hour up to 14 days, a day
 * beyond. It keeps a series to at most a few hundred points and a query to a few hundred
 * documents per (token, chain, method), whatever the range.
 */
export function seriesGranularity(rangeMs: number): SeriesGranularity {
  if (rangeMs <= 6 * HOUR_MS) return 'minute';
  if (rangeMs <= 14 * DAY_MS) return 'hour';
  return 'day';
}

/** A run of whole buckets of one granularity: [from, to), both bucket starts. */
export interface BucketSpan {
  granularity: SeriesGranularity;
  from: number;
  to: number;
}

/**
 * Covers the minute-aligned range [start, end) exactly with the fewest buckets no coarser than
 * `coarsest`: whole days in the middle, hours at the edges, minutes at the very edges. Totals
 * over the spans are then exact to the minute while a query reads only a few hundred docs.
 */
export function coverRange(start: number, end: number, coarsest: SeriesGranularity): BucketSpan[] {
  if (start >= end) return [];
  if (coarsest === 'minute') return [{ granularity: 'minute', from: start, to: end }];
  const finer = FINER[coarsest];
  const lo = ceilTo(start, coarsest);
  const hi = floorTo(end, coarsest);
  if (lo >= hi) return coverRange(start, end, finer);
  return [...coverRange(start, lo, finer), { granularity: coarsest, from: lo, to: hi }, ...coverRange(hi, end, finer)];
}

/** Bucket starts of a series over [start, end) at `g` (the first bucket may start before `start`). */
export function seriesBuckets(start: number, end: number, g: SeriesGranularity): number[] {
  const out: number[] = [];
  for (let t = floorTo(start, g); t < end; t = nextBucket(t, g)) out.push(t);
  return out;
}
