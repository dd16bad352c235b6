/**
 * Error answers of the chain-facing surface (DESIGN §5). JSON-RPC errors carry the request's id
 * as JSON text (so a huge numeric id is echoed exactly); REST errors are
 * `{"error":{"code","message",…}}`.
 */
export const RpcCode = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  unauthorized: -32001,
  forbidden: -32003,
  limitExceeded: -32005,
  upstreamUnavailable: -32010,
  upstreamTimeout: -32015,
  /**
   * A node's error inside a 2xx answer that has no JSON-RPC code of its own (java-tron's
   * `{"Error": …}`): JSON-RPC's generic server error, so the call is metered as an error.
   */
  nodeError: -32000,
} as const;

export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** A JSON-RPC error response; `idText` is the id's JSON text (`null` when unknown). */
export function rpcError(idText: string, code: number, message: string, data?: unknown): string {
  const error = data === undefined ? { code, message } : { code, message, data };
  return `{"jsonrpc":"2.0","id":${idText},"error":${JSON.stringify(error)}}`;
}

/**
 * Whom an error about the whole request answers: the id of a single call, the ids of a batch's
 * calls (notifications have none), or nobody (null) when the body could not be read.
 */
export type RequestIds = { kind: 'single'; idText: string } | { kind: 'batch'; idTexts: string[] } | null;

/**
 * An error about the whole request, answered to each caller's id: one error for a single call,
 * one per call with an id for a batch, one with id null when no id could be read.
 */
export function rpcErrorFor(ids: RequestIds, code: number, message: string, data?: unknown): string {
  if (ids?.kind === 'batch' && ids.idTexts.length > 0) return `[${ids.idTexts.map((id) => rpcError(id, code, message, data)).join(',')}]`;
  return rpcError(ids?.kind === 'single' ? ids.idText : 'null', code, message, data);
}

export function restError(code: string, message: string, extra?: Record<string, unknown>): string {
  return JSON.stringify({ error: { code, message, ...extra } });
}

/** The JSON-RPC code for a refused admission (503: the gateway's own temporary outage, as its other 503s). */
export function admissionRpcCode(status: 401 | 403 | 429 | 503): number {
  if (status === 401) return RpcCode.unauthorized;
  if (status === 403) return RpcCode.forbidden;
  if (status === 503) return RpcCode.internalError;
  return RpcCode.limitExceeded;
}

/** The upstream layer's failures, as HTTP status, JSON-RPC code and REST code. */
export function upstreamFailureCodes(kind: 'unavailable' | 'timeout'): { status: 502 | 504; rpc: number; rest: string } {
  return kind === 'timeout'
    ? { status: 504, rpc: RpcCode.upstreamTimeout, rest: 'upstream_timeout' }
    : { status: 502, rpc: RpcCode.upstreamUnavailable, rest: 'upstream_unavailable' };
}
