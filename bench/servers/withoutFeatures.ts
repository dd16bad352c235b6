/**
 * Bench only: the gateway role with some of the features the throughput target names taken
 * out, so that what each costs a call is measured against the same build with it, in one run
 * (bench/compare-gateway.ts, `WITHOUT=`). The service never loads this file.
 */
import type { Admission, Gatekeeper } from '../../src/gateway/admission.js';
import { TokenGatekeeper } from '../../src/gateway/gatekeeper.js';
import { UpstreamPools } from '../../src/gateway/upstream.js';
import type { LimitDecision, Limiter } from '../../src/infra/limits/port.js';
import type { Runtime } from '../../src/runtime.js';

/**
 * - `usage`: usage records not queued (still built, and counted in the metrics);
 * - `metrics`: the call not counted in the chain-call metrics;
 * - `limits`: no limiter, every call granted from one fixed decision (the limit headers still built from it);
 * - `headers`: no limit headers on the answers;
 * - `auth`: no admission at all, every single call gets the first call's admission (its headers too, unless `headers` is out);
 * - `coalescing`: identical reads in flight each make their own upstream call (pools with `coalesce: false`);
 * - `cache`: no response cache (pools with `cacheBytes: 0`).
 */
export const FEATURES = ['usage', 'metrics', 'limits', 'headers', 'auth', 'coalescing', 'cache'] as const;
export type Feature = (typeof FEATURES)[number];

/** `usage,limits` → the features; an unknown name is an error that lists the known ones. */
export function parseFeatures(list: string | undefined): Feature[] {
  const names = (list ?? '')
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f !== '');
  for (const name of names) {
    if (!(FEATURES as readonly string[]).includes(name)) throw new Error(`unknown feature "${name}" to take out: choose from ${FEATURES.join(', ')}`);
  }
  return names as Feature[];
}

/** Takes `features` out of the runtime's gateway, before the server is built on it. */
export function withoutFeatures(runtime: Runtime, features: Feature[]): void {
  if (features.length === 0) return;
  const gateway = runtime.gateway;
  if (!gateway) throw new Error('this runtime serves no chain calls');
  if (features.includes('usage')) runtime.usageQueue.enqueue = () => undefined;
  if (features.includes('metrics')) runtime.telemetry.observeCall = () => undefined;
  if (features.includes('coalescing') || features.includes('cache')) {
    // Replaced before the server is built on them: nothing has used the first pools yet.
    void gateway.pools.close();
    gateway.pools = new UpstreamPools(gateway.chains, {
      ...(features.includes('coalescing') ? { coalesce: false } : {}),
      ...(features.includes('cache') ? { cacheBytes: 0 } : {}),
    });
  }
  let gatekeeper = gateway.gatekeeper;
  if (features.includes('limits')) gatekeeper = new TokenGatekeeper(gateway.tokens, grantingEverything(), runtime.config.plans);
  if (features.includes('auth')) gatekeeper = firstAdmissionForAll(gatekeeper);
  if (features.includes('headers')) gatekeeper = withoutHeaders(gatekeeper);
  gateway.gatekeeper = gatekeeper;
}

/** A limiter that grants every call from one decision, as a lease covering the second would, without the lease's work. */
function grantingEverything(): Limiter {
  const rate = { limit: 1_000_000, remaining: 999_999, resetAt: 0 };
  const monthly = { limit: null, remaining: null, resetAt: 0 };
  return {
    take: (request): LimitDecision => ({ granted: request.cost, refusedBy: null, rate, monthly, retryAfterSeconds: null }),
    refund: () => undefined,
    monthlyUsed: async () => 0,
    close: async () => undefined,
  };
}

/** Single calls after the first admitted one get its admission again: no token lookup, plan check or limiter. */
function firstAdmissionForAll(inner: Gatekeeper): Gatekeeper {
  let fixed: Admission | null = null;
  return {
    admit(request) {
      if (fixed !== null && request.cost === 1) return fixed;
      const keep = (admission: Admission): Admission => {
        if (admission.ok && request.cost === 1) fixed = admission;
        return admission;
      };
      const admission = inner.admit(request);
      return admission instanceof Promise ? admission.then(keep) : keep(admission);
    },
  };
}

function withoutHeaders(inner: Gatekeeper): Gatekeeper {
  const none = {};
  // Object.assign, not `{ ...admission, headers }`: that spread takes V8's slow path, which would be measured as the headers' cost.
  const strip = (admission: Admission): Admission => Object.assign({}, admission, { headers: none });
  return {
    admit(request) {
      const admission = inner.admit(request);
      return admission instanceof Promise ? admission.then(strip) : strip(admission);
    },
  };
}
