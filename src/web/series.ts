import type { SeriesGranularity, SeriesPoint } from '../api/types.js';

export interface Bucket {
  /** Unix seconds. */
  t: number;
  requests: number;
  errors: number;
  success: number;
  /** Weighted by requests; null where there were none. */
  avgResponseMs: number | null;
}

const STEPS: Record<SeriesGranularity, number> = { minute: 60, hour: 3600, day: 86_400 };

/**
 * The API's series made fit for a chart: gaps between its points filled with zeros (a quiet
 * minute is a zero, not a line drawn across it), then merged into at most `maxPoints` buckets
 * so 30 days of minute data stays smooth and light.
 */
export function chartBuckets(series: SeriesPoint[], period: { start: string; end: string }, granularity: SeriesGranularity, maxPoints = 720): Bucket[] {
  const points = series
    .map((p) => ({ t: Date.parse(p.t) / 1000, requests: p.requests, errors: p.errors, success: p.requests - p.errors, avgResponseMs: p.avgResponseMs }))
    .filter((p) => Number.isFinite(p.t))
    .sort((a, b) => a.t - b.t);
  const step = STEPS[granularity];
  const start = Math.floor(Date.parse(period.start) / 1000 / step) * step;
  const end = Math.floor(Date.parse(period.end) / 1000 / step) * step;
  if (!Number.isFinite(start) || !Number.isFinite(end) || end < start) return points.map((p) => ({ ...p }));

  const slots = Math.floor((end - start) / step) + 1;
  const factor = Math.max(1, Math.ceil(slots / maxPoints));
  const width = step * factor;
  const out: Bucket[] = [];
  for (let t = start; t <= end; t += width) out.push({ t, requests: 0, errors: 0, success: 0, avgResponseMs: null });
  const latencySum = new Array<number>(out.length).fill(0);
  for (const p of points) {
    const i = Math.floor((p.t - start) / width);
    const b = out[i];
    if (!b) continue;
    b.requests += p.requests;
    b.errors += p.errors;
    b.success += p.success;
    if (p.avgResponseMs !== null) latencySum[i] = (latencySum[i] ?? 0) + p.avgResponseMs * p.requests;
  }
  out.forEach((b, i) => {
    b.avgResponseMs = b.requests > 0 ? (latencySum[i] ?? 0) / b.requests : null;
  });
  return out;
}
