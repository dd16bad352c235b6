import type { PeriodMetrics, TokenMetrics, UserMetrics } from '../api/types.js';
import { query } from './api.js';
import { fmtDateTime } from './format.js';
import { type Polled, periodOf, useFilters, usePolled, useSession } from './hooks.js';

/** The account's metrics for the shared filters, refreshed every 60 s. */
export function useUserMetrics(method = ''): Polled<UserMetrics> {
  const { api } = useSession();
  const [filters] = useFilters();
  return usePolled(
    (signal) => {
      const { start, end } = periodOf(filters);
      return api.get<UserMetrics>(`/api/v1/metrics/user${query({ start, end, chain: filters.chain, method })}`, signal);
    },
    [filters, method],
  );
}

/** One token's analytics for the shared filters. */
export function useTokenMetrics(tokenId: string): Polled<TokenMetrics> {
  const { api } = useSession();
  const [filters] = useFilters();
  return usePolled(
    (signal) => {
      const { start, end } = periodOf(filters);
      return api.get<TokenMetrics>(`/api/v1/metrics/tokens/${encodeURIComponent(tokenId)}${query({ start, end, chain: filters.chain })}`, signal);
    },
    [filters, tokenId],
  );
}

/** Says so when the plan's retention cut the start of the asked period. */
export function RetentionNote({ metrics }: { metrics: PeriodMetrics | null }) {
  const { account } = useSession();
  if (!metrics?.retention.clamped) return null;
  return (
    <p class="note" role="status">
      Your {account.plan.name} plan keeps {account.plan.retention_days} days of history: this shows from {fmtDateTime(metrics.period.start)}.
    </p>
  );
}
