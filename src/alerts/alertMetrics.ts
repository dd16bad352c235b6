/**
 * The figures alert rules are evaluated on: a small port so the evaluator does not care where
 * they come from (rollupMetrics.ts reads them from the usage read models).
 */
export interface WindowStats {
  requests: number;
  errors: number;
  /** Mean total response time in ms; null without requests. */
  avgMs: number | null;
  /** 95th percentile of the total response time in ms; null without requests. */
  p95Ms: number | null;
  /** Calls refused by a limit (HTTP 429, or JSON-RPC -32005 inside a batch); 0 unless asked for. */
  rateLimited: number;
  /** Mean requests per second of the busiest bucket the source resolves (the busiest minute for windows up to 6 h). */
  peakRps: number;
}

export type UsageScope = { accountId: string } | { tokenId: string };

export interface AlertMetrics {
  /**
   * Calls of the account (or of one of its tokens) with `from <= at <= to`, and those earlier in
   * the source's bucket that holds `from` (the roll-ups resolve minutes). `refusalsNeeded` > 0:
   * count the limit refusals too, at least that many when there are (costly: one read a refusal).
   */
  windowStats(accountId: string, tokenId: string | null, from: Date, to: Date, refusalsNeeded?: number): Promise<WindowStats>;
  /**
   * Quota used in the calendar month (UTC) that contains `at`: a token's charged calls; an
   * account's, less those of its tokens with their own limit (spec: Authentication 6).
   */
  monthUsage(scope: UsageScope, at: Date): Promise<number>;
}

export const EMPTY_WINDOW: WindowStats = { requests: 0, errors: 0, avgMs: null, p95Ms: null, rateLimited: 0, peakRps: 0 };

/** JSON-RPC "limit exceeded", what a batch member refused by a limit carries. */
export const LIMIT_EXCEEDED_RPC_CODE = -32005;
