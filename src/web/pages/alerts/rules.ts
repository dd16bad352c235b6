import type { Alert, AlertChannel, AlertType, ChannelType } from '../../../api/types.js';
import { fmtNumber } from '../../format.js';

/** What each alert type measures and how its figures read: shared by the form, the draft checks and the list. */

type Unit = 'percent' | 'ms' | 'count' | 'multiplier';

/** How the form presents each alert type; the server decides what is valid and says why not. */
export const TYPES: Record<AlertType, { label: string; help: string; conditions: { value: string; label: string }[] }> = {
  usage_threshold: { label: 'Usage threshold', help: 'The account has used a share of its monthly request limit.', conditions: [] },
  error_rate: { label: 'Error rate', help: 'The share of failed calls over a time window.', conditions: [] },
  response_time: {
    label: 'Response time',
    help: 'Response time over a time window.',
    conditions: [
      { value: 'avg', label: 'Average' },
      { value: 'p95', label: '95th percentile' },
    ],
  },
  rate_limiting: {
    label: 'Rate limiting',
    help: 'Calls refused by the rate limit, or traffic getting close to it.',
    conditions: [
      { value: 'hitting', label: 'Hitting the limit' },
      { value: 'approaching', label: 'Approaching the limit' },
    ],
  },
  token_usage: {
    label: 'Token usage',
    help: 'One token reaches a share of its monthly limit, has unusual traffic, or a high error rate.',
    conditions: [
      { value: 'percent_of_limit', label: 'Share of its monthly limit' },
      { value: 'unusual_traffic', label: 'Unusual traffic' },
      { value: 'error_rate', label: 'High error rate' },
    ],
  },
};
export const TYPE_IDS = Object.keys(TYPES) as AlertType[];

export const unitOf = (type: AlertType, condition: string): Unit =>
  type === 'response_time'
    ? 'ms'
    : type === 'rate_limiting' && condition === 'hitting'
      ? 'count'
      : type === 'token_usage' && condition === 'unusual_traffic'
        ? 'multiplier'
        : 'percent';
export const isMonthly = (type: AlertType, condition: string): boolean =>
  type === 'usage_threshold' || (type === 'token_usage' && condition === 'percent_of_limit');
/** Ratios and averages mean something only over enough calls. */
export const usesMinRequests = (type: AlertType, condition: string): boolean =>
  type === 'error_rate' || type === 'response_time' || (type === 'token_usage' && condition !== 'percent_of_limit');
export const usesBaseline = (type: AlertType, condition: string): boolean => type === 'token_usage' && condition === 'unusual_traffic';
export const tokenRule = (type: AlertType): 'required' | 'optional' | 'none' =>
  type === 'token_usage' ? 'required' : type === 'usage_threshold' ? 'none' : 'optional';

export const UNIT_LABEL: Record<Unit, string> = {
  percent: 'Threshold (%)',
  ms: 'Threshold (ms)',
  count: 'Refused calls in the window',
  multiplier: 'Times the usual traffic',
};
const UNIT_SUFFIX: Record<Unit, string> = { percent: ' %', ms: ' ms', count: ' refused calls', multiplier: '× usual' };

/** The smallest default plan with each channel, to explain the ones this plan lacks (DESIGN §5). */
export const CHANNEL_PLAN: Record<ChannelType, string> = {
  email: 'Free',
  webhook: 'Developer',
  chat: 'Professional',
  incident: 'Professional',
  sms: 'Unlimited',
};
export const CHANNELS: { type: ChannelType; field: 'to' | 'url' | 'routing_key'; label: string; placeholder: string }[] = [
  { type: 'email', field: 'to', label: 'Email address', placeholder: 'you@example.com' },
  { type: 'webhook', field: 'url', label: 'Webhook URL', placeholder: 'https://example.com/hooks/gateway' },
  { type: 'chat', field: 'url', label: 'Team chat webhook URL', placeholder: 'https://hooks.slack.com/services/…' },
  { type: 'incident', field: 'routing_key', label: 'Incident routing key', placeholder: 'routing key' },
  { type: 'sms', field: 'to', label: 'Phone number', placeholder: '+14155550123' },
];

export const formatValue = (a: Pick<Alert, 'type' | 'condition'>, v: number): string =>
  `${fmtNumber(Math.round(v * 100) / 100)}${UNIT_SUFFIX[unitOf(a.type, a.condition ?? '')]}`;

export function describeRule(a: Pick<Alert, 'type' | 'condition' | 'threshold' | 'window_minutes'>): string {
  const t = TYPES[a.type];
  const condition = t?.conditions.find((c) => c.value === a.condition)?.label;
  const threshold = `${fmtNumber(a.threshold)}${UNIT_SUFFIX[unitOf(a.type, a.condition ?? '')]}`;
  const span = a.window_minutes ? `over ${a.window_minutes} min` : 'this month';
  return `${t?.label ?? a.type}${condition ? ` (${condition.toLowerCase()})` : ''} ≥ ${threshold}, ${span}`;
}

export const destination = (c: AlertChannel): string => ('to' in c ? c.to : 'url' in c ? c.url : c.routing_key);

/** A webhook or chat channel: the ones with a URL (a webhook's secret shows once). */
export type UrlChannel = Extract<AlertChannel, { url: string }>;
