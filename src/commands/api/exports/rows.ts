import { isErrorUsage, type UsageCall, type UsageRecord, usedQuota } from '../../../domain/usage.js';

/** One exported call: the columns of the CSV and the fields of the JSON export, in order. */
export interface ExportRow {
  time: string;
  request_id: string;
  token_id: string;
  chain: string;
  method: string;
  status: number;
  outcome: 'success' | 'error';
  rpc_error_code: number | null;
  error_message: string | null;
  total_ms: number;
  upstream_ms: number | null;
  client_ip: string;
  upstream: string | null;
  /** Whether the call used monthly quota: a month's rows summed give the quota it used (refused calls and invalid batch members are metered, not charged). */
  charged: boolean;
  /** How a served read was answered (hit, miss, coalesced, hedged); null when no upstream was asked, or not recorded. */
  cache: NonNullable<UsageRecord['cache']> | null;
}

export const EXPORT_COLUMNS: ReadonlyArray<keyof ExportRow> = [
  'time',
  'request_id',
  'token_id',
  'chain',
  'method',
  'status',
  'outcome',
  'rpc_error_code',
  'error_message',
  'total_ms',
  'upstream_ms',
  'client_ip',
  'upstream',
  'charged',
  'cache',
];

export function exportRow(r: UsageCall): ExportRow {
  return {
    time: r.at,
    request_id: r.requestId,
    token_id: r.tokenId,
    chain: r.chain,
    method: r.method,
    status: r.status,
    outcome: isErrorUsage(r) ? 'error' : 'success',
    rpc_error_code: r.rpcErrorCode,
    error_message: r.errorMessage,
    total_ms: r.totalMs,
    upstream_ms: r.upstreamMs,
    client_ip: r.clientIp,
    upstream: r.upstream,
    charged: usedQuota(r),
    cache: r.cache ?? null,
  };
}
