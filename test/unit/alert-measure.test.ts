import { describe, expect, it } from 'vitest';
import { EMPTY_WINDOW, type WindowStats } from '../../src/alerts/alertMetrics.js';
import { measure } from '../../src/alerts/measure.js';
import { type RuleInput, ruleFromInput } from '../../src/domain/alert.js';
import { DEFAULT_PLANS, effectiveTokenLimits } from '../../src/domain/plans.js';

const rule = (input: RuleInput) => {
  const { rule: r, issues } = ruleFromInput(input);
  expect(issues).toEqual([]);
  return r;
};
const win = (w: Partial<WindowStats>): WindowStats => ({ ...EMPTY_WINDOW, ...w });

describe('measure: each type and condition', () => {
  it('usage_threshold: share of the account monthly limit', () => {
    const m = measure(rule({ type: 'usage_threshold', threshold: 80 }), { monthUsed: 85_000, monthlyLimit: 100_000 });
    expect(m).toMatchObject({ breached: true, value: 85 });
    expect(m.summary).toMatch(/85% of its monthly limit/);
    expect(measure(rule({ type: 'usage_threshold', threshold: 80 }), { monthUsed: 79_999, monthlyLimit: 100_000 }).breached).toBe(false);
  });
  it('error_rate: needs min_requests, then compares the percentage', () => {
    const r = rule({ type: 'error_rate', threshold: 5, minRequests: 20 });
    expect(measure(r, { window: win({ requests: 10, errors: 10 }) })).toMatchObject({ breached: false, value: null });
    expect(measure(r, { window: win({ requests: 40, errors: 2 }) })).toMatchObject({ breached: true, value: 5 });
    expect(measure(r, { window: win({ requests: 40, errors: 1 }) })).toMatchObject({ breached: false, value: 2.5 });
  });
  it('response_time: avg or p95', () => {
    const w = { window: win({ requests: 50, avgMs: 120, p95Ms: 900 }) };
    expect(measure(rule({ type: 'response_time', threshold: 500 }), w)).toMatchObject({ breached: false, value: 120 });
    expect(measure(rule({ type: 'response_time', condition: 'p95', threshold: 500 }), w)).toMatchObject({ breached: true, value: 900 });
  });
  it('rate_limiting: hitting counts refusals, approaching compares the peak rate', () => {
    expect(measure(rule({ type: 'rate_limiting', condition: 'hitting', threshold: 3 }), { window: win({ rateLimited: 3 }) })).toMatchObject({
      breached: true,
      value: 3,
    });
    expect(measure(rule({ type: 'rate_limiting', condition: 'approaching', threshold: 80 }), { peakRpsPercent: 79 })).toMatchObject({ breached: false });
    expect(measure(rule({ type: 'rate_limiting', condition: 'approaching', threshold: 80 }), { peakRpsPercent: null })).toMatchObject({
      breached: false,
      value: null,
    });
  });
  it('token_usage: share of the token limit, unusual traffic against the baseline, error rate', () => {
    const tokenId = 'tok_aaaaaaaaaaaaaaaa';
    expect(measure(rule({ type: 'token_usage', threshold: 90, tokenId }), { monthUsed: 950, monthlyLimit: 1000 })).toMatchObject({ breached: true, value: 95 });
    const unusual = rule({ type: 'token_usage', condition: 'unusual_traffic', threshold: 5, tokenId, minRequests: 10 });
    expect(measure(unusual, { window: win({ requests: 100 }), baselinePerWindow: 10 })).toMatchObject({ breached: true, value: 10 });
    expect(measure(unusual, { window: win({ requests: 40 }), baselinePerWindow: 10 })).toMatchObject({ breached: false, value: 4 });
    // A quiet baseline still compares (against one request per window), above min_requests only.
    expect(measure(unusual, { window: win({ requests: 12 }), baselinePerWindow: 0 })).toMatchObject({ breached: true, value: 12 });
    expect(measure(unusual, { window: win({ requests: 9 }), baselinePerWindow: 0 })).toMatchObject({ breached: false });
    expect(
      measure(rule({ type: 'token_usage', condition: 'error_rate', threshold: 50, tokenId, minRequests: 1 }), { window: win({ requests: 2, errors: 1 }) }),
    ).toMatchObject({ breached: true });
  });
});

describe('measure: bad data is "no data", never a breach or an exception', () => {
  const cases: Array<[string, RuleInput, Parameters<typeof measure>[1]]> = [
    ['NaN errors', { type: 'error_rate', threshold: 5, minRequests: 1 }, { window: win({ requests: 10, errors: Number.NaN }) }],
    ['negative requests', { type: 'error_rate', threshold: 5, minRequests: 1 }, { window: win({ requests: -5, errors: 3 }) }],
    ['infinite latency', { type: 'response_time', threshold: 5, minRequests: 1 }, { window: win({ requests: 3, avgMs: Number.POSITIVE_INFINITY }) }],
    ['no window at all', { type: 'response_time', threshold: 5 }, {}],
    ['no limit', { type: 'usage_threshold', threshold: 5 }, { monthUsed: 10, monthlyLimit: null }],
    ['a zero limit', { type: 'usage_threshold', threshold: 5 }, { monthUsed: 10, monthlyLimit: 0 }],
    ['a string where a number goes', { type: 'usage_threshold', threshold: 5 }, { monthUsed: '10' as unknown as number, monthlyLimit: 100 }],
    ['unavailable', { type: 'error_rate', threshold: 5 }, { unavailable: 'The token is gone.' }],
  ];
  for (const [name, input, figures] of cases) {
    it(name, () => expect(measure(rule(input), figures)).toMatchObject({ breached: false, value: null }));
  }
});

describe('effective token limits follow the gatekeeper', () => {
  it('custom limits apply only on plans that have them', () => {
    expect(effectiveTokenLimits(DEFAULT_PLANS.developer, { monthlyLimit: 1000, rateLimit: 3 })).toEqual({ rps: 3, monthly: 1000, ownMonthly: true });
    expect(effectiveTokenLimits(DEFAULT_PLANS.free, { monthlyLimit: 1000, rateLimit: 3 })).toEqual({ rps: 5, monthly: 100_000, ownMonthly: false });
  });
});
