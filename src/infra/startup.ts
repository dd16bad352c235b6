import { withinDeadline } from './deadline.js';

/**
 * At start, the production services (Redis, EventStoreDB, MongoDB) may come up after this
 * process (a compose file, a rolling restart). An operator wants the process to say what it is
 * waiting for, keep trying for a while, and then give up with the reason: never hang silently
 * and never serve half-connected.
 */
export class DependencyUnreachableError extends Error {
  constructor(
    readonly dependency: string,
    readonly target: string,
    /** STARTUP_TIMEOUT_SECONDS: what the message names, not the time spent (the waiter stops a retry short of it). */
    readonly deadlineMs: number,
    readonly lastError: unknown,
  ) {
    super(`${dependency} at ${target} was not reachable within ${seconds(deadlineMs)} s (STARTUP_TIMEOUT_SECONDS): ${describe(lastError)}`);
    this.name = 'DependencyUnreachableError';
  }
}

export interface WaitOptions {
  /** How long to keep trying in all. */
  deadlineMs: number;
  /** Each attempt fails after this long; the next starts after `retryMs`. */
  attemptTimeoutMs?: number;
  retryMs?: number;
  /** Told once per failed attempt (what is awaited, and why it failed). */
  log: (message: string) => void;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

const seconds = (ms: number): number => Math.round(ms / 1000);
const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e)) || 'no answer';

/**
 * Query parameters that carry a secret in a store URL: PostgreSQL's `password` and `sslpassword`,
 * MongoDB's `authMechanismProperties` (an AWS session token), any `…token`, `…key`, `…secret`.
 */
const SECRET_PARAMETER = /pass|pwd|secret|token|key|credential|signature|mechanismproperties/i;

/** `?a=1&password=x` with the secret parameters' values masked; the rest (a database, `tls=false`) kept, since it helps. */
function redactQuery(query: string): string {
  return query.replace(/([?&])([^=&#]*)=([^&#]*)/g, (whole, sep: string, name: string) => {
    let decoded = name;
    try {
      decoded = decodeURIComponent(name);
    } catch {}
    return SECRET_PARAMETER.test(decoded) ? `${sep}${name}=***` : whole;
  });
}

/** A URL as it may be logged: without credentials, in its user part or its query. A URL of several hosts (a Redis Cluster's seeds) is no WHATWG URL, and is redacted as text. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    const text = u.toString();
    const query = text.indexOf('?');
    return query < 0 ? text : text.slice(0, query) + redactQuery(text.slice(query));
  } catch {
    const several = /^([a-z][a-z0-9+.-]*:\/\/)(?:([^:@/]*):[^@/]*@)?([^@/?]*)(.*)$/i.exec(url);
    if (!several) return '(unparsable URL)';
    const [, scheme, user, hosts, rest = ''] = several;
    const query = rest.indexOf('?');
    const tail = query < 0 ? rest : rest.slice(0, query) + redactQuery(rest.slice(query));
    return `${scheme}${user === undefined ? '' : `${user}:***@`}${hosts}${tail}`;
  }
}

/** An attempt that did not answer within its share of the wait. */
class NoAnswerInTime extends Error {}

/**
 * Runs `attempt` until it succeeds or `deadlineMs` has passed, and returns its result. Each
 * failure is logged with the dependency's name and (credential-free) address.
 */
export async function untilReachable<T>(dependency: string, url: string, attempt: (timeoutMs: number) => Promise<T>, options: WaitOptions): Promise<T> {
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const attemptTimeoutMs = options.attemptTimeoutMs ?? 5000;
  const retryMs = options.retryMs ?? 1000;
  const target = redactUrl(url);
  const started = now();
  /** What the error names: the last failure, unless that was only a last attempt cut short by the deadline. */
  let reported: unknown;
  for (;;) {
    const timeoutMs = Math.max(1, Math.min(attemptTimeoutMs, started + options.deadlineMs - now()));
    try {
      return await withinDeadline(attempt(timeoutMs), timeoutMs, () => new NoAnswerInTime(`no answer within ${timeoutMs} ms`));
    } catch (e) {
      // A slice of a few ms left by a late retry (a loaded machine) says less than the dependency's own error before it.
      if (reported === undefined || !(e instanceof NoAnswerInTime && timeoutMs < attemptTimeoutMs)) reported = e;
      const waited = now() - started;
      if (waited + retryMs >= options.deadlineMs) throw new DependencyUnreachableError(dependency, target, options.deadlineMs, reported);
      options.log(`Waiting for ${dependency} at ${target}: ${describe(e)}; retrying (giving up after ${seconds(options.deadlineMs)} s)`);
      await sleep(retryMs);
    }
  }
}
