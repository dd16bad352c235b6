import { ceilTo, floorTo, type SeriesGranularity, seriesGranularity } from '../projections/usageBuckets.js';
import { MINUTE_RETENTION_DAYS, retentionStart } from '../projections/usageExpiry.js';

/** A period as the metrics and the exports cover it (epoch ms, UTC). */
export interface CoveredPeriod {
  start: number;
  end: number;
  granularity: SeriesGranularity;
  /** The asked start was older than the plan keeps: `start` is the retention's. */
  clamped: boolean;
  /** The oldest time the plan keeps. */
  earliest: number;
}

/**
 * What a period asked of the metrics or the exports covers: no `start` is the plan's whole
 * retention, an older one is clamped to it; figures count whole minutes, or whole hours when the
 * series is per day (over 14 days) or the period starts before the minute roll-ups'
 * MINUTE_RETENTION_DAYS: `start` is rounded down (up, rather than to before the retention) and
 * `end` up. The API resolves every period with it, and the dashboard states an export's period
 * with it, so the page says what the file holds.
 */
export function coveredPeriod(asked: { start: number | null; end: number }, nowMs: number, retentionDays: number): CoveredPeriod {
  const earliest = retentionStart(nowMs, retentionDays);
  const clamped = asked.start !== null && asked.start < earliest;
  const start = Math.max(asked.start ?? earliest, earliest);
  // Minute roll-ups are kept MINUTE_RETENTION_DAYS: a period starting before that counts whole hours.
  const pastMinutes = floorTo(start, 'minute') < retentionStart(nowMs, MINUTE_RETENTION_DAYS);
  const byLength = seriesGranularity(ceilTo(asked.end, 'minute') - floorTo(start, 'minute'));
  const granularity = byLength === 'minute' && pastMinutes ? 'hour' : byLength;
  const unit = granularity === 'day' || pastMinutes ? 'hour' : 'minute';
  const end = ceilTo(asked.end, unit);
  // Rounding down to before the retention cutoff would show data from before it (the cutoff, or a
  // start in the cutoff's hour, is rounded to that hour's start): round up instead.
  const floored = floorTo(start, unit);
  return { start: Math.min(floored < earliest ? ceilTo(start, unit) : floored, end), end, granularity, clamped, earliest };
}
