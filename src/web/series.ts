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

const DAY_S = 86_400;
/** uPlot's month and year steps (30 and 365 days). */
const MONTH_S = 30 * DAY_S;
const YEAR_S = 365 * DAY_S;

/**
 * Where the time axis puts its ticks (Unix seconds) for uPlot's chosen step: whole steps of UTC,
 * like the labels. uPlot's own ticks are found in the browser's zone (its UTC is the local clock
 * moved by the offset of the day it starts from), so on a day the owner's clock changes for
 * daylight saving they went off the step: "1 Nov, 03:00, 05:00, 07:00, 10:00" in Los Angeles.
 * Steps under a day divide it, and so fall on the same instants in every zone; longer ones start
 * at the first UTC midnight, months on the 1st.
 */
export function utcTicks(min: number, max: number, step: number): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max) || !(step > 0) || max < min) return [];
  const ticks: number[] = [];
  if (step >= MONTH_S) {
    const months = step >= YEAR_S ? 12 * Math.round(step / YEAR_S) : Math.round(step / MONTH_S);
    const first = new Date(min * 1000);
    const year = first.getUTCFullYear();
    let month = first.getUTCMonth() + (Date.UTC(year, first.getUTCMonth(), 1) < min * 1000 ? 1 : 0);
    for (let t = Date.UTC(year, month, 1) / 1000; t <= max && ticks.length < 1000; t = Date.UTC(year, month, 1) / 1000) {
      ticks.push(t);
      month += months;
    }
    return ticks;
  }
  const first = step >= DAY_S ? Math.ceil(min / DAY_S) * DAY_S : Math.ceil(min / step) * step;
  for (let i = 0; ticks.length < 1000; i++) {
    const t = Math.round((first + i * step) * 1000) / 1000;
    if (t > max) break;
    ticks.push(t);
  }
  return ticks;
}
