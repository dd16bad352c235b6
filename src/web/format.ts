/**
 * Formatting for people: numbers, times, durations, and the metric targets. Figures are written
 * in the owner's locale, as they type them (`numbers.ts` reads them back); times in UTC, said so,
 * but for a token's expiry, the owner's own day (docs/decisions.md, Dashboard).
 */
import { numberFormat } from './numbers.js';

const integer = numberFormat();
const compact = numberFormat({ notation: 'compact', maximumFractionDigits: 1 });
const fixed = [0, 1, 2].map((digits) => numberFormat({ minimumFractionDigits: digits, maximumFractionDigits: digits }));
const exact = numberFormat({ maximumFractionDigits: 6 });

export const fmtInt = (n: number): string => integer.format(Math.round(n));
/** A number as it is, up to 6 decimals (a threshold as the owner set it). */
export const fmtNumber = (n: number): string => exact.format(n);
const fmtFixed = (n: number, digits: 0 | 1 | 2): string => (fixed[digits] ?? exact).format(n);
export const fmtCompact = (n: number): string => (Math.abs(n) < 10_000 ? fmtInt(n) : compact.format(n));
// Units are joined with a no-break space so a value never wraps away from its unit.
export const fmtMs = (ms: number | null | undefined): string =>
  ms === null || ms === undefined || !Number.isFinite(ms) ? '—' : ms < 10 ? `${fmtFixed(ms, 1)}\u00a0ms` : `${fmtInt(ms)}\u00a0ms`;

/** A percentage with enough digits to tell 99.9 % from 99.95 %. */
export function fmtPct(pct: number | null): string {
  if (pct === null || !Number.isFinite(pct)) return '—';
  if (pct === 0 || pct === 100) return `${fmtInt(pct)}\u00a0%`;
  return `${fmtFixed(pct, pct >= 99 || pct < 1 ? 2 : 1)}\u00a0%`;
}

const dateTime = new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', timeZone: 'UTC' });
const dateOnly = new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: 'numeric', timeZone: 'UTC' });

export const fmtDateTime = (iso: string | null | undefined): string => (iso ? `${dateTime.format(new Date(iso))} UTC` : '—');
export const fmtDate = (iso: string | null | undefined): string => (iso ? dateOnly.format(new Date(iso)) : '—');

// The viewer's own zone (no timeZone): a token's expiry is the owner's day, its instant named with its offset.
const localDate = new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: 'numeric' });
const localDateTime = new Intl.DateTimeFormat('en-GB', {
  year: 'numeric',
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  hourCycle: 'h23',
  timeZoneName: 'shortOffset',
});

/** The viewer's time zone, as the browser names it ("America/Los_Angeles"). */
export const ownTimeZone = (): string => Intl.DateTimeFormat().resolvedOptions().timeZone;
/** `YYYY-MM-DD` of the day holding `ms` in the viewer's zone: what a date input holds. */
export const localIsoDate = (ms: number): string => {
  const d = new Date(ms);
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
};

/**
 * A token's expiry as the owner reads it, in the viewer's zone: the last day it works whole
 * (`through`: the day before the one it stops in) and the instant it stops, with the zone's offset
 * ("31 Dec 2026", "1 Jan 2027, 23:50 GMT-8"). The form states a date picked the same way, so the
 * date picked is the date shown.
 */
export function fmtExpiry(iso: string): { through: string; stops: string } {
  const stops = new Date(iso);
  const dayBefore = new Date(stops.getFullYear(), stops.getMonth(), stops.getDate() - 1, 12);
  return { through: localDate.format(dayBefore), stops: localDateTime.format(stops) };
}
/** The day holding `ms` in the viewer's zone ("30 Nov 2026"). */
export const fmtLocalDate = (ms: number): string => localDate.format(new Date(ms));

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
  successRate: {
    label: 'Success Rate',
    goal: `> ${fmtNumber(99.9)} %`,
    meets: (v) => v > 99.9,
    format: fmtPct,
    help: 'Share of requests completed successfully.',
  },
  errorRate: { label: 'Error Rate', goal: `< ${fmtNumber(0.1)} %`, meets: (v) => v < 0.1, format: fmtPct, help: 'Share of requests that ended in an error.' },
  nodeLatency: {
    label: 'Node Latency',
    goal: '< 50 ms',
    meets: (v) => v < 50,
    format: fmtMs,
    help: "Time the chain nodes took to process the gateway's requests.",
  },
} satisfies Record<string, Target>;

export const CHANNEL_NAMES: Record<string, string> = { email: 'Email', webhook: 'Webhook', chat: 'Team chat', incident: 'Incident management', sms: 'SMS' };
