import type { Account, Alert, AlertType, ChannelType } from '../../../api/types.js';
import { fmtInt } from '../../format.js';
import { parseTypedNumber, typedNumber } from '../../numbers.js';
import { CHANNELS, destination, isMonthly, TYPES, tokenRule, unitOf, usesBaseline, usesMinRequests } from './rules.js';

/** The form's fields as typed, before they are checked and sent. */
export interface Draft {
  name: string;
  type: AlertType;
  condition: string;
  threshold: string;
  windowMinutes: string;
  tokenId: string;
  minRequests: string;
  baselineHours: string;
  enabled: boolean;
  channels: Record<ChannelType, { on: boolean; value: string }>;
}

export function draftOf(alert: Alert | null, account: Account): Draft {
  const channels = Object.fromEntries(CHANNELS.map((c) => [c.type, { on: false, value: '' }])) as Draft['channels'];
  if (!alert) {
    channels.email = { on: true, value: account.email };
    return {
      name: '',
      type: 'usage_threshold',
      condition: '',
      threshold: '80',
      windowMinutes: '5',
      tokenId: '',
      minRequests: '10',
      baselineHours: '24',
      enabled: true,
      channels,
    };
  }
  for (const c of alert.channels) channels[c.type] = { on: true, value: destination(c) };
  return {
    name: alert.name,
    type: alert.type,
    condition: alert.condition ?? '',
    // In the owner's own way of writing it ("99,5" in German), as it will be read back.
    threshold: typedNumber(alert.threshold),
    windowMinutes: String(alert.window_minutes ?? 5),
    tokenId: alert.token_id ?? '',
    minRequests: String(alert.min_requests ?? 10),
    baselineHours: String(alert.baseline_hours ?? 24),
    enabled: alert.enabled !== false,
    channels,
  };
}

/** A count typed in a whole-number field ("10.000" and "10,000" are ten thousand), or NaN. */
const wholeNumber = (typed: string): number => parseTypedNumber(typed, { integer: true });
/** The threshold typed: a count of calls is a whole number too. */
const thresholdOf = (d: Draft): number => parseTypedNumber(d.threshold, { integer: unitOf(d.type, d.condition) === 'count' });

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const PHONE = /^\+[1-9]\d{6,14}$/;
const ROUTING_KEY = /^[A-Za-z0-9_-]{8,64}$/;
const HTTPS = /^https?:\/\/[^\s]+$/i;

export function validate(d: Draft, account: Account): Record<string, string> {
  const e: Record<string, string> = {};
  if (!d.name.trim()) e.name = 'Give the alert a name.';
  else if (d.name.trim().length > 100) e.name = 'At most 100 characters.';
  const unit = unitOf(d.type, d.condition);
  const t = thresholdOf(d);
  if (!Number.isFinite(t)) e.threshold = 'Enter a number.';
  else if (unit === 'percent' && (t <= 0 || t > 100)) e.threshold = 'A percentage above 0, at most 100.';
  else if (unit === 'ms' && (t < 1 || t > 600_000)) e.threshold = `From 1 to ${fmtInt(600_000)} ms.`;
  else if (unit === 'count' && (!Number.isInteger(t) || t < 1)) e.threshold = 'A whole number, 1 or more.';
  else if (unit === 'multiplier' && (t <= 1 || t > 1000)) e.threshold = 'More than 1 (times the usual traffic), at most 1000.';
  if (!isMonthly(d.type, d.condition)) {
    const w = wholeNumber(d.windowMinutes);
    if (!Number.isInteger(w) || w < 1 || w > 1440) e.windowMinutes = 'Whole minutes from 1 to 1440.';
  }
  if (tokenRule(d.type) === 'required' && !d.tokenId) e.tokenId = 'Pick the token to watch.';
  if (usesMinRequests(d.type, d.condition)) {
    const n = wholeNumber(d.minRequests);
    if (!Number.isInteger(n) || n < 1 || n > 1_000_000) e.minRequests = `A whole number from 1 to ${fmtInt(1_000_000)}.`;
  }
  if (usesBaseline(d.type, d.condition)) {
    const h = wholeNumber(d.baselineHours);
    if (!Number.isInteger(h) || h < 1 || h > 168) e.baselineHours = 'Whole hours from 1 to 168.';
    else if (h * 60 < 2 * wholeNumber(d.windowMinutes)) e.baselineHours = 'The baseline must span at least two windows.';
  }
  const chosen = CHANNELS.filter((c) => d.channels[c.type].on);
  if (chosen.length === 0) e.channels = 'Choose at least one way to be notified.';
  for (const c of chosen) {
    const v = d.channels[c.type].value.trim();
    if (!account.plan.channels.includes(c.type)) e[`channel-${c.type}`] = `Not on your ${account.plan.name} plan.`;
    else if (!v) e[`channel-${c.type}`] = `Enter the ${c.label.toLowerCase()}.`;
    else if (c.type === 'email' && !EMAIL.test(v)) e[`channel-${c.type}`] = 'This is not an email address.';
    else if ((c.type === 'webhook' || c.type === 'chat') && !HTTPS.test(v)) e[`channel-${c.type}`] = 'Enter a URL starting with https://.';
    else if (c.type === 'sms' && !PHONE.test(v)) e[`channel-${c.type}`] = 'International format, e.g. +14155550123.';
    else if (c.type === 'incident' && !ROUTING_KEY.test(v)) e[`channel-${c.type}`] = '8 to 64 letters, digits, - or _.';
  }
  return e;
}

/** The whole definition; fields that do not apply are null, so an edit that changes the type drops them. */
export function bodyOf(d: Draft): Record<string, unknown> {
  const body: Record<string, unknown> = { name: d.name.trim(), type: d.type, threshold: thresholdOf(d), enabled: d.enabled };
  body.condition = TYPES[d.type].conditions.length > 0 ? d.condition || TYPES[d.type].conditions[0]?.value : null;
  body.window_minutes = isMonthly(d.type, d.condition) ? null : wholeNumber(d.windowMinutes);
  body.token_id = tokenRule(d.type) !== 'none' && d.tokenId ? d.tokenId : null;
  body.min_requests = usesMinRequests(d.type, d.condition) ? wholeNumber(d.minRequests) : null;
  body.baseline_hours = usesBaseline(d.type, d.condition) ? wholeNumber(d.baselineHours) : null;
  body.channels = CHANNELS.filter((c) => d.channels[c.type].on).map((c) => ({ type: c.type, [c.field]: d.channels[c.type].value.trim() }));
  return body;
}
