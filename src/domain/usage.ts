import { z } from 'zod';
import { sha256Hex } from './sha256.js';

/** One chain-facing call (one batch member) as metered by the gateway. */
export const UsageRecord = z.object({
  /** Unique per record: the HTTP request id, suffixed with `:<index>` for batch members. */
  requestId: z.string().min(1),
  /** ISO 8601 UTC time the call arrived. */
  at: z.string(),
  accountId: z.string(),
  tokenId: z.string(),
  chain: z.string(),
  /** JSON-RPC method, or the REST path after the token. */
  method: z.string(),
  /** HTTP status of the answer (a batch member carries the batch's status). */
  status: z.number().int(),
  /** JSON-RPC error code when the answer carried one (from the gateway or the node). */
  rpcErrorCode: z.number().int().nullable(),
  errorMessage: z.string().nullable(),
  totalMs: z.number().nonnegative(),
  upstreamMs: z.number().nonnegative().nullable(),
  clientIp: z.string(),
  /** Which upstream answered, by its configured label. */
  upstream: z.string().nullable(),
  /**
   * Days the account's plan kept usage when the call was metered: read models may expire what
   * this call counts after that (absent in records from before it was carried).
   */
  retentionDays: z.number().int().positive().optional(),
});
export type UsageRecord = z.infer<typeof UsageRecord>;

export const USAGE_EVENT_TYPE = 'UsageRecorded';
export const usageStream = (accountId: string): string => `usage-${accountId}`;

/** A call is an error when its HTTP status is an error or it carried a JSON-RPC error. */
export const isErrorUsage = (r: Pick<UsageRecord, 'status' | 'rpcErrorCode'>): boolean =>
  r.status >= 400 || r.rpcErrorCode !== null;

/** Deterministic event id (UUID-shaped, from the request id) so a retried append is idempotent. */
export function usageEventId(requestId: string): string {
  const h = sha256Hex(`usage:${requestId}`);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
