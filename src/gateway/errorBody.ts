/**
 * Errors a node reports inside a 2xx answer, for metering: the caller gets the node's answer as
 * it is, the usage record says it failed and why (docs/decisions.md, "A node's error inside a 200
 * is metered as an error").
 *
 * "tron" — java-tron's HTTP API answers almost every failure with 200 and one of:
 * - `{"Error":"class org.tron.core.exception.ContractValidateException : …"}` (a servlet's
 *   exception, `Util.printErrorMsg`);
 * - `{"code":"SIGERROR","txid":"…","message":"<hex>"}` (broadcasttransaction's `Return`);
 * - `{"result":{"code":"CONTRACT_VALIDATE_ERROR","message":"<hex>"}, …}` (the transaction
 *   builders', triggerconstantcontract's and estimateenergy's `TransactionExtention`).
 * A `Return` code other than `SUCCESS` is a failure; its `message` is hex of UTF-8 text unless the
 * call asked `visible: true`.
 */

export const ERROR_BODY_KINDS = ['tron'] as const;
export type ErrorBodyKind = (typeof ERROR_BODY_KINDS)[number];

/**
 * Answers above this are never read: java-tron's error answers are a few hundred bytes (a
 * reverted triggerconstantcontract, the largest, carries its transaction), and the large answers
 * (blocks, transaction lists) are successes; reading them all would cost every call.
 */
export const ERROR_BODY_MAX_BYTES = 64 * 1024;

const MESSAGE_MAX = 500;
const ERROR_KEY = Buffer.from('"Error"');
const CODE_KEY = Buffer.from('"code"');
const HEX_TEXT = /^(?:[0-9a-fA-F]{2})+$/;
/** A `Return.response_code` name (SIGERROR, CONTRACT_VALIDATE_ERROR, OTHER_ERROR…). */
const RESPONSE_CODE = /^[A-Z][A-Z_]{1,63}$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters mark hex that is not text
const NOT_TEXT = /[\u0000-\u0008\u000e-\u001f\ufffd]/;

/** The node's error message when `body` reports one, in the node's way `kind`; null for anything else. */
export function errorInBody(kind: ErrorBodyKind, body: Buffer): string | null {
  if (kind !== 'tron' || body.length > ERROR_BODY_MAX_BYTES) return null;
  // Cheap first: a body with neither key is no error answer, and is not parsed.
  if (body.indexOf(ERROR_KEY) < 0 && body.indexOf(CODE_KEY) < 0) return null;
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (!isObject(value)) return null;
  if (typeof value.Error === 'string') return clip(value.Error);
  return returnFailure(value) ?? (isObject(value.result) ? returnFailure(value.result) : null);
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

const clip = (text: string): string => text.trim().slice(0, MESSAGE_MAX);

/** A protobuf `Return` printed as JSON, when its code says it failed: `CODE: message`. */
function returnFailure(r: Record<string, unknown>): string | null {
  const code = r.code;
  if (typeof code !== 'string' || code === 'SUCCESS' || !RESPONSE_CODE.test(code)) return null;
  const message = typeof r.message === 'string' ? readableMessage(r.message) : '';
  return clip(message === '' ? code : `${code}: ${message}`);
}

/** The message as text: java-tron prints it as hex of UTF-8 bytes unless the call was `visible`. */
function readableMessage(message: string): string {
  if (!HEX_TEXT.test(message)) return message;
  const text = Buffer.from(message, 'hex').toString('utf8');
  return NOT_TEXT.test(text) ? message : text;
}
