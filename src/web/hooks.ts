import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Account } from '../api/types.js';
import { type ApiClient, type ApiError, asApiError } from './api.js';
import { fmtDateTime } from './format.js';

/** Panels refresh every 60 s (spec: dashboard freshness). */
export const REFRESH_MS = 60_000;

export interface Polled<T> {
  data: T | null;
  error: ApiError | null;
  loading: boolean;
  /** When the shown data arrived (ms since epoch). */
  updatedAt: number | null;
  refresh(): void;
}

/**
 * Loads on mount and when `deps` change, then again every `intervalMs` and when the tab comes
 * back after being hidden that long. Keeps the last data on screen while reloading or failing.
 */
export function usePolled<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], intervalMs = REFRESH_MS): Polled<T> {
  const [state, setState] = useState<Omit<Polled<T>, 'refresh'>>({ data: null, error: null, loading: true, updatedAt: null });
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const updatedAtRef = useRef<number | null>(null);

  // The caller's deps decide when to reload; `tick` forces it.
  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    setState((s) => ({ ...s, loading: true }));
    loadRef
      .current(controller.signal)
      .then(
        (data) => {
          if (controller.signal.aborted) return;
          updatedAtRef.current = Date.now();
          setState({ data, error: null, loading: false, updatedAt: updatedAtRef.current });
        },
        (error: unknown) => {
          if (controller.signal.aborted) return;
          const apiError = asApiError(error);
          setState((s) => ({ ...s, error: apiError, loading: false }));
        },
      )
      .finally(() => {
        if (!controller.signal.aborted) timer = setTimeout(() => setTick((t) => t + 1), intervalMs);
      });
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick, intervalMs]);

  useEffect(() => {
    const onVisible = () => {
      const at = updatedAtRef.current;
      if (document.visibilityState === 'visible' && at !== null && Date.now() - at >= intervalMs) setTick((t) => t + 1);
    };
    document.addEventListener('visibilitychange', onVisible);
    return () => document.removeEventListener('visibilitychange', onVisible);
  }, [intervalMs]);

  const refresh = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, refresh };
}

/** Its load failed and nothing is shown from before, nor on its way: what `LoadFailed` tells the page's placeholders. */
export const loadFailed = (polled: Polled<unknown>): boolean => polled.data === null && polled.error !== null && !polled.loading;

/** A value that re-renders its component every `ms` (for "updated 12 s ago"). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const id = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(id);
  }, [ms]);
  return now;
}

export interface Session {
  api: ApiClient;
  account: Account;
  /** Reloads the account (plan, usage, token count) after a change. */
  refreshAccount(): Promise<void>;
  logout(): Promise<void>;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error('useSession outside a logged-in page');
  return session;
}

/** Time range and network shared by the overview, usage and error pages. */
export type RangeKey = '24h' | '7d' | '30d' | 'custom';

export interface Filters {
  range: RangeKey;
  /** `YYYY-MM-DDTHH:mm`, read as UTC; only for `custom`. */
  customStart: string;
  customEnd: string;
  /** A chain id, or '' for every network. */
  chain: string;
}

const HOURS: Record<Exclude<RangeKey, 'custom'>, number> = { '24h': 24, '7d': 24 * 7, '30d': 24 * 30 };

export const toLocalInput = (ms: number): string => new Date(ms).toISOString().slice(0, 16);
export const fromLocalInput = (value: string): number => Date.parse(`${value}:00Z`);

export function initialFilters(now = Date.now()): Filters {
  return { range: '24h', customStart: toLocalInput(now - 2 * 86_400_000), customEnd: toLocalInput(now), chain: '' };
}

/** The period the filters name, as of `now`: relative ranges slide with every refresh. */
export function periodOf(f: Filters, now = Date.now()): { start: string; end: string } {
  if (f.range === 'custom') {
    const start = fromLocalInput(f.customStart);
    const end = fromLocalInput(f.customEnd);
    if (Number.isFinite(start) && Number.isFinite(end) && start < end) return { start: new Date(start).toISOString(), end: new Date(end).toISOString() };
  }
  const hours = f.range === 'custom' ? 24 : HOURS[f.range];
  return { start: new Date(now - hours * 3_600_000).toISOString(), end: new Date(now).toISOString() };
}

/** How far ahead a period may end (the API refuses more with a 400). */
const MAX_AHEAD_MS = 86_400_000;

export function customRangeProblem(f: Filters, now = Date.now()): string | null {
  if (f.range !== 'custom') return null;
  const start = fromLocalInput(f.customStart);
  const end = fromLocalInput(f.customEnd);
  if (!Number.isFinite(start) || !Number.isFinite(end)) return 'Give both a start and an end.';
  if (start >= end) return 'The start must be before the end.';
  // The times are UTC: one typed in a zone ahead of UTC (its "today") can be further ahead than the API takes.
  if (end > now + MAX_AHEAD_MS) return `The end must be at most a day after now, ${fmtDateTime(new Date(now).toISOString())}.`;
  return null;
}

export const FiltersContext = createContext<[Filters, (f: Filters) => void] | null>(null);

export function useFilters(): [Filters, (f: Filters) => void] {
  const value = useContext(FiltersContext);
  if (!value) throw new Error('useFilters outside the dashboard');
  return value;
}
