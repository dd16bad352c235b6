import type { Measurement } from '../domain/alert.js';
import type { AlertRule } from '../domain/alertEvents.js';
import type { WindowStats } from './alertMetrics.js';

/** What the evaluator gathered for one rule (only the parts that rule needs). */
export interface Figures {
  window?: WindowStats | undefined;
  /** unusual_traffic: mean requests per window over the trailing baseline. */
  baselinePerWindow?: number | undefined;
  monthUsed?: number | undefined;
  /** The limit the month's usage counts against; null when there is none. */
  monthlyLimit?: number | null | undefined;
  /** rate_limiting/approaching: the highest share of its rps limit any watched token reached, in %. */
  peakRpsPercent?: number | null | undefined;
  /** Set when the rule cannot be measured (its token is gone, its account is missing…). */
  unavailable?: string | undefined;
}

const finite = (n: unknown): n is number => typeof n === 'number' && Number.isFinite(n);
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;
const pct = (n: number) => `${round(n)}%`;
const span = (rule: AlertRule) => `the last ${rule.windowMinutes} min`;
const who = (rule: AlertRule) => (rule.tokenId ? `token ${rule.tokenId}` : 'the account');

const nothing = (summary: string): Measurement => ({ breached: false, value: null, summary });
const judged = (value: number, threshold: number, summary: string): Measurement => ({ breached: value >= threshold, value: round(value, 2), summary });

/**
 * Turns figures into a value and a verdict (breached when value ≥ threshold) with a sentence
 * for the notification. Pure and total: missing, negative or non-finite figures measure as
 * "no data", never as a breach and never as an exception.
 */
export function measure(rule: AlertRule, f: Figures): Measurement {
  if (f.unavailable) return nothing(f.unavailable);
  const t = rule.threshold;
  const w = f.window;
  const enough = (min: number | null) => w !== undefined && finite(w.requests) && w.requests > 0 && w.requests >= (min ?? 1);
  const tooFew = () =>
    nothing(`Only ${finite(w?.requests) ? w.requests : 0} requests from ${who(rule)} in ${span(rule)}; at least ${rule.minRequests ?? 1} are needed to judge.`);

  const errorRate = (): Measurement => {
    if (!w || !enough(rule.minRequests) || !finite(w.errors) || w.errors < 0) return tooFew();
    // Multiplied before dividing: (29 / 100) * 100 is 28.999…, under a 29% threshold it meets.
    const rate = (w.errors * 100) / w.requests;
    return judged(rate, t, `Error rate of ${who(rule)} is ${pct(rate)} over ${span(rule)} (${w.errors} of ${w.requests} requests; threshold ${pct(t)}).`);
  };
  const monthShare = (subject: string): Measurement => {
    const used = f.monthUsed;
    const limit = f.monthlyLimit;
    if (!finite(used) || used < 0) return nothing(`No usage figure for ${subject} this month.`);
    if (!finite(limit) || limit <= 0) return nothing(`${subject} has no monthly limit to measure against.`);
    const share = (used * 100) / limit;
    return judged(share, t, `${subject} has used ${pct(share)} of its monthly limit (${used} of ${limit} requests; threshold ${pct(t)}).`);
  };

  switch (rule.type) {
    case 'usage_threshold':
      return monthShare('The account');
    case 'error_rate':
      return errorRate();
    case 'response_time': {
      const p95 = rule.condition === 'p95';
      const ms = p95 ? w?.p95Ms : w?.avgMs;
      if (!enough(rule.minRequests) || !finite(ms) || ms < 0) return tooFew();
      return judged(ms, t, `${p95 ? 'p95' : 'Average'} response time of ${who(rule)} is ${Math.round(ms)} ms over ${span(rule)} (threshold ${t} ms).`);
    }
    case 'rate_limiting': {
      if (rule.condition === 'approaching') {
        const share = f.peakRpsPercent;
        if (!finite(share) || share < 0) return nothing(`No traffic from ${who(rule)} in ${span(rule)}.`);
        return judged(share, t, `Peak request rate of ${who(rule)} reached ${pct(share)} of its per-second limit in ${span(rule)} (threshold ${pct(t)}).`);
      }
      const refused = w?.rateLimited;
      if (!finite(refused) || refused < 0) return nothing(`No traffic from ${who(rule)} in ${span(rule)}.`);
      return judged(refused, t, `${refused} calls of ${who(rule)} were refused by a rate or monthly limit in ${span(rule)} (threshold ${t}).`);
    }
    case 'token_usage': {
      if (rule.condition === 'percent_of_limit') return monthShare(`Token ${rule.tokenId}`);
      if (rule.condition === 'error_rate') return errorRate();
      // unusual_traffic: this window against the mean window of the trailing baseline (at least 1, so a quiet baseline still compares).
      const base = f.baselinePerWindow;
      if (!w || !enough(rule.minRequests)) return tooFew();
      if (!finite(base) || base < 0) return nothing(`No baseline for token ${rule.tokenId}.`);
      const ratio = w.requests / Math.max(base, 1);
      return judged(
        ratio,
        t,
        `Token ${rule.tokenId} made ${w.requests} requests in ${span(rule)}, ${round(ratio)}× its average of ${round(base)} per ${rule.windowMinutes} min over the previous ${rule.baselineHours} h (threshold ${t}×).`,
      );
    }
  }
}
