import { lookup as dnsLookup } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { Agent, request } from 'undici';
import { isPublicAddress } from './addressPolicy.js';

/**
 * A notification URL whose host is (or resolves to) an address the SSRF rule refuses. The message
 * goes to the alert's owner: it names the host, not the address, or any owner could look up what
 * the operator's internal names resolve to.
 */
export class AddressRefusedError extends Error {
  readonly code = 'ADDRESS_REFUSED';
  constructor(
    host: string,
    readonly address: string,
  ) {
    super(`${host} resolves to a private, loopback or link-local address; notifications go to public addresses only`);
    this.name = 'AddressRefusedError';
  }
}

export interface HttpResponse {
  status: number;
  /** The start of the body (for error messages; never more than a few KiB). */
  body: string;
}

export interface HttpPoster {
  post(url: string, init: { headers: Record<string, string>; body: string }): Promise<HttpResponse>;
  close(): Promise<void>;
}

/**
 * Resolves the name itself and hands the socket only addresses that pass the policy: the check
 * happens at connect time, on the very address connected to, so a DNS answer that changes
 * between a check and the connection (DNS rebinding) cannot slip a private address through.
 */
const guardedLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { all: true, family: options.family ?? 0, ...(options.hints !== undefined ? { hints: options.hints } : {}) }, (err, addresses) => {
    if (err) return callback(err, '');
    const refused = addresses.find((a) => !isPublicAddress(a.address));
    const first = addresses[0];
    if (refused || !first) return callback(new AddressRefusedError(hostname, refused?.address ?? 'nothing'), '');
    if (options.all) return callback(null, addresses);
    return callback(null, first.address, first.family);
  });
};

const BODY_PREVIEW_BYTES = 2048;

/**
 * HTTP POST for notifications. `guard` (owner-given URLs: webhooks, chat) refuses private
 * destinations unless `allowPrivate` (the operator's NOTIFY_ALLOW_PRIVATE); literal IPs are
 * checked directly since the socket does no lookup for them. Redirects are not followed (a
 * redirect could point anywhere) and every call has a deadline.
 */
export function createHttpPoster(options: { guard: boolean; allowPrivate: boolean; timeoutMs?: number }): HttpPoster {
  const enforce = options.guard && !options.allowPrivate;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const agent = new Agent({
    connect: { timeout: timeoutMs, ...(enforce ? { lookup: guardedLookup } : {}) },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  return {
    async post(url, init) {
      const target = new URL(url);
      const host = target.hostname.replace(/^\[|\]$/g, '');
      if (enforce && isIP(host) && !isPublicAddress(host)) throw new AddressRefusedError(host, host);
      const res = await request(target, { method: 'POST', headers: init.headers, body: init.body, dispatcher: agent, signal: AbortSignal.timeout(timeoutMs) });
      let body = '';
      for await (const chunk of res.body) {
        body += Buffer.from(chunk as Uint8Array).toString('utf8');
        if (body.length >= BODY_PREVIEW_BYTES) break;
      }
      if (body.length >= BODY_PREVIEW_BYTES) res.body.destroy();
      return { status: res.statusCode, body: body.slice(0, BODY_PREVIEW_BYTES) };
    },
    close: () => agent.close(),
  };
}

/** The AddressRefusedError behind an error, however deep undici wrapped it. */
export function addressRefusal(error: unknown): AddressRefusedError | null {
  let e: unknown = error;
  for (let depth = 0; e && depth < 5; depth++) {
    if (e instanceof AddressRefusedError) return e;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}
