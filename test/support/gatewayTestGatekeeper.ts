import { generateToken } from '../../src/domain/tokenFormat.js';
import type { Admission, AdmissionRequest, Caller, Gatekeeper } from '../../src/gateway/admission.js';

/**
 * A real, minimal Gatekeeper for protocol-layer tests: one valid token, passed in the path or as
 * a Bearer header; optionally only `k` more calls granted (then 429); optionally some chains
 * outside the "plan" (403). It keeps every admission request it got.
 */
export class TestGatekeeper implements Gatekeeper {
  readonly token = generateToken('api');
  readonly caller: Caller = { tokenId: 'tok-test', accountId: 'acc-test' };
  readonly requests: AdmissionRequest[] = [];
  readonly forbiddenChains = new Set<string>();
  private remaining: number | null = null;
  /** When set, admit() fails as a gatekeeper whose backend is down would: with a rejected promise, or by throwing at once. */
  failure: Error | null = null;
  failsAtOnce = false;

  /** Grant only `k` more calls (null: unlimited). */
  grantOnly(k: number | null): void {
    this.remaining = k;
  }

  private headers(): Record<string, string> {
    const remaining = this.remaining ?? 1000;
    return {
      'x-ratelimit-limit': '1000',
      'x-ratelimit-remaining': String(remaining),
      'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 1),
      'x-monthlylimit-limit': '100000',
      'x-monthlylimit-remaining': String(remaining),
      'x-monthlylimit-reset': '1767225600',
    };
  }

  admit(request: AdmissionRequest): Promise<Admission> {
    this.requests.push(request);
    if (this.failure && this.failsAtOnce) throw this.failure;
    return this.decide(request);
  }

  private async decide(request: AdmissionRequest): Promise<Admission> {
    if (this.failure) throw this.failure;
    if ((request.via !== 'path' && request.via !== 'bearer') || request.token !== this.token) {
      const message =
        request.via === 'path' || request.via === 'bearer' || request.via === null
          ? 'Invalid, revoked or expired API token'
          : 'Pass the API token in the path or as a Bearer header';
      return { ok: false, status: 401, code: 'unauthorized', message, caller: null, headers: this.headers(), retryAfterSeconds: null };
    }
    if (this.forbiddenChains.has(request.chain)) {
      return {
        ok: false,
        status: 403,
        code: 'chain_not_in_plan',
        message: `${request.chain} is not in your plan`,
        caller: this.caller,
        headers: this.headers(),
        retryAfterSeconds: null,
      };
    }
    if (this.remaining === null) return { ok: true, caller: this.caller, granted: request.cost, headers: this.headers(), retryAfterSeconds: null };
    const granted = Math.min(request.cost, this.remaining);
    this.remaining -= granted;
    if (granted === 0 && request.cost > 0) {
      return {
        ok: false,
        status: 429,
        code: 'rate_limited',
        message: 'Rate limit exceeded',
        caller: this.caller,
        headers: { ...this.headers(), 'retry-after': '1' },
        retryAfterSeconds: 1,
      };
    }
    return { ok: true, caller: this.caller, granted, headers: this.headers(), retryAfterSeconds: granted < request.cost ? 1 : null };
  }
}
