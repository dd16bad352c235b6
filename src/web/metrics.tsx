import { query } from './api.js';
import { fmtDateTime } from './format.js';
import { type Polled, periodOf, useFilters, usePolled, useSession } from './hooks.js';
import type { Metrics } from './types.js';

/** The account's metrics for the shared filters, refreshed every 60 s. */
export function useUserMetrics(method = ''): Polled<Metrics> {
  const { api } = useSession();
  const [filters] = useFilters();
  return usePolled(
    (signal) => {
      const { start, end } = periodOf(filters);
      return api.get<Metrics>(`/api/v1/metrics/user${query({ start, end, chain: filters.chain, method })}`, signal);
    },
    [filters, method],
  );
}

/** One token's analytics for the shared filters. */
export function useTokenMetrics(tokenId: string): Polled<Metrics> {
  const { api } = useSession();
  const [filters] = useFilters();
  return usePolled(
    (signal) => {
      const { start, end } = periodOf(filters);
      return api.get<Metrics>(`/api/v1/metrics/tokens/${encodeURIComponent(tokenId)}${query({ start, end, chain: filters.chain })}`, signal);
    },
    [filters, tokenId],
  );
}

/** Says so when the plan's retention cut the start of the asked period. */
export function RetentionNote({ metrics }: { metrics: Metrics | null }) {
  const { account } = useSession();
  const [filters] = useFilters();
  if (!metrics) return null;
  const clamped = metrics.retention?.clamped ?? Date.parse(metrics.period.start) > Date.parse(periodOf(filters).start) + 60_000;
  if (!clamped) return null;
  return (
    <p class="note" role="status">
      Your {account.plan.name} plan keeps {account.plan.retention_days} days of history: this shows from {fmtDateTime(metrics.period.start)}.
    </p>
  );
}
