/**
 * A value now, or later: code that needs no I/O answers at once (a call on the hot path then
 * builds no promise for it), and with a promise when it does. Used across the layers (the
 * gatekeeper, the limiter adapters, the token cache), so it belongs to none of them.
 */
export type MaybePromise<T> = T | Promise<T>;
