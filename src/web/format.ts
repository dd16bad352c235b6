/** Formatting for people: numbers, times, durations, and the metric targets. */

const integer = new Intl.NumberFormat('en-US');
const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

export const fmtInt = (n: number): string => integer.format(Math.round(n));
export const fmtCompact = (n: number): string => (Math.abs(n) < 10_000 ? fmtInt(n) : compact.format(n));
// Units are joined with a no-break space so a value never wraps away from its unit.
export const fmtMs = (ms: number | null | undefined): string =>
  ms === null || ms === undefined || !Number.isFinite(ms) ? '—' : ms < 10 ? `${ms.toFixed(1)}\u00a0ms` : `${fmtInt(ms)}\u00a0ms`;

/** A percentage with enough digits to tell 99.9 % from 99.95 %. */
export function fmtPct(pct: number | null): string {
  if (pct === null || !Number.isFinite(pct)) return '—';
  if (pct === 0 || pct === 100) return `${pct}\u00a0%`;
  const digits = pct >= 99 || pct < 1 ? 2 : 1;
  return `${pct.toFixed(digits)}\u00a0%`;
}

const dateTime = new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', timeZone: 'UTC' });
const dateOnly = new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: 'numeric', timeZone: 'UTC' });

export const fmtDateTime = (iso: string | null | undefined): string => (iso ? `${dateTime.format(new Date(iso))} UTC` : '—');
export const fmtDate = (iso: string | null | undefined): string => (iso ? dateOnly.format(new Date(iso)) : '—');

const clock = new Intl.DateTimeFormat('en-GB', { hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZone: 'UTC' });
const dayMonth = new Intl.DateTimeFormat('en-GB', { day: 'numeric', month: 'short', timeZone: 'UTC' });
const DAY_S = 86_400;

/** Chart tick labels (Unix seconds, UTC, 24-hour): dates for day steps and at midnight, else the time. */
export const fmtTick = (seconds: number, stepSeconds: number): string =>
  stepSeconds >= DAY_S || seconds % DAY_S === 0 ? dayMonth.format(new Date(seconds * 1000)) : clock.format(new Date(seconds * 1000));
export const fmtChartTime = (seconds: number): string => `${dayMonth.format(new Date(seconds * 1000))} ${clock.format(new Date(seconds * 1000))}`;

/** "12 s ago", "3 min ago", "2 h ago". */
export function fmtAgo(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.floor(h / 24)} d ago`;
}

export const rate = (part: number, whole: number): number | null => (whole > 0 ? (part / whole) * 100 : null);

/** The dashboard's four metrics and their targets (spec: Dashboard metrics). */
export interface Target {
  label: string;
  /** How the target reads, e.g. "< 100 ms". */
  goal: string;
  meets(value: number): boolean;
  format(value: number | null): string;
  help: string;
}

export const TARGETS = {
  responseTime: {
    label: 'Response Time',
    goal: '< 100 ms',
    meets: (v) => v < 100,
    format: fmtMs,
    help: 'Average time to process a request and return a response.',
  },
  successRate: { label: 'Success Rate', goal: '> 99.9 %', meets: (v) => v > 99.9, format: fmtPct, help: 'Share of requests completed successfully.' },
  errorRate: { label: 'Error Rate', goal: '< 0.1 %', meets: (v) => v < 0.1, format: fmtPct, help: 'Share of requests that ended in an error.' },
  nodeLatency: {
    label: 'Node Latency',
    goal: '< 50 ms',
    meets: (v) => v < 50,
    format: fmtMs,
    help: "Time the chain nodes took to process the gateway's requests.",
  },
} satisfies Record<string, Target>;

export const CHANNEL_NAMES: Record<string, string> = { email: 'Email', webhook: 'Webhook', chat: 'Team chat', incident: 'Incident management', sms: 'SMS' };
