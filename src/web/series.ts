import type { SeriesPoint } from './types.js';

export interface Bucket {
  /** Unix seconds. */
  t: number;
  requests: number;
  errors: number;
  success: number;
  /** Weighted by requests; null where there were none. */
  avgResponseMs: number | null;
}

const toSeconds = (t: string | number): number => (typeof t === 'number' ? (t > 1e11 ? t / 1000 : t) : Date.parse(t) / 1000);

const STEPS: Record<string, number> = { minute: 60, hour: 3600, day: 86_400, '1m': 60, '1h': 3600, '1d': 86_400 };

/**
 * The API's series made fit for a chart: gaps between its points filled with zeros (a quiet
 * minute is a zero, not a line drawn across it), then merged into at most `maxPoints` buckets
 * so 30 days of minute data stays smooth and light.
 */
export function chartBuckets(series: SeriesPoint[], period: { start: string; end: string }, granularity: string | number | undefined, maxPoints = 720): Bucket[] {
  const points = series
    .map((p) => ({ t: toSeconds(p.t), requests: p.requests, errors: p.errors, success: p.success ?? p.requests - p.errors, avgResponseMs: p.avgResponseMs }))
    .filter((p) => Number.isFinite(p.t))
    .sort((a, b) => a.t - b.t);
  const step = typeof granularity === 'number' ? granularity : (granularity && STEPS[granularity]) || inferStep(points);
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

function inferStep(points: { t: number }[]): number {
  let step = Number.POSITIVE_INFINITY;
  for (let i = 1; i < points.length; i++) {
    const d = (points[i]?.t ?? 0) - (points[i - 1]?.t ?? 0);
    if (d > 0 && d < step) step = d;
  }
  return Number.isFinite(step) ? step : 60;
}
