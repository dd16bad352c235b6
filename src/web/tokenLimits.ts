import { type Account, MAX_TOKEN_LIMIT } from '../api/types.js';
import { fmtInt } from './format.js';
import { parseTypedNumber } from './numbers.js';

/**
 * A token's own limits as typed in the token forms. The fields are text, not `type="number"`: a
 * number field hands over '' for anything it cannot read ("1e"), which would pass as "no limit"
 * and save a token without the limit its owner typed.
 */

/**
 * The typed count: null when empty, NaN when not a whole number 1 or more. Thousands separators
 * as the owner writes them ("1,000,000", "1.000.000", "1 000 000"); "1,5" is not fifteen.
 */
export function parseLimit(typed: string): number | null {
  if (typed.trim() === '') return null;
  const n = parseTypedNumber(typed, { integer: true });
  return Number.isInteger(n) && n >= 1 ? n : Number.NaN;
}

export function monthlyLimitProblem(typed: string, plan: Account['plan']): string | null {
  const n = parseLimit(typed);
  if (n === null) return null;
  if (Number.isNaN(n)) return 'A whole number of requests, 1 or more.';
  const total = plan.monthly_requests;
  if (total === null && n > MAX_TOKEN_LIMIT) return `At most ${fmtInt(MAX_TOKEN_LIMIT)} requests.`;
  if (total !== null && n >= total) return `Must be lower than the account's ${fmtInt(total)} requests a month.`;
  return null;
}

export function rateLimitProblem(typed: string, plan: Account['plan']): string | null {
  const n = parseLimit(typed);
  if (n === null) return null;
  if (Number.isNaN(n)) return 'A whole number of requests per second, 1 or more.';
  if (n > plan.rps) return `At most the plan's ${fmtInt(plan.rps)} requests per second.`;
  return null;
}
