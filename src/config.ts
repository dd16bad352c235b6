import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { type AuthLimits, DEFAULT_AUTH_LIMITS } from './commands/authThrottle.js';
import { DEFAULT_HASH_CONCURRENCY } from './commands/passwords.js';
import { type PlanCatalog, planCatalog } from './domain/plans.js';
import { DEFAULT_CACHE_BYTES } from './gateway/cache/responseCache.js';
import { DEFAULT_GATEWAY_LIMITS, type GatewayLimits } from './gateway/chainCalls.js';
import { loadChains } from './gateway/chains.js';
import type { NotifyConfig } from './infra/notify/index.js';
import { parseRedisUrl } from './infra/redis/client.js';

export const ROLES = ['all', 'gateway', 'api', 'projector'] as const;
export type Role = (typeof ROLES)[number];

const MIB = 1024 * 1024;

/** One Redis (redis://, rediss://) or a Redis Cluster by some of its nodes (redis+cluster://host:port[,host:port…]). */
const redisUrl = z.string().superRefine((v, ctx) => {
  try {
    parseRedisUrl(v);
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: error instanceof Error ? error.message : String(error) });
  }
});

const url = (protocols: string[]) =>
  z.string().refine(
    (v) => {
      try {
        return protocols.includes(new URL(v).protocol);
      } catch {
        return false;
      }
    },
    `must be a URL (${protocols.join(' or ')})`,
  );

/**
 * A whole number as an operator writes one: decimal digits (surrounding spaces ignored). Not
 * `z.coerce.number()`, which reads "" as 0 (PORT= listened on a random port, an empty
 * ALERT_EVALUATION_INTERVAL_SECONDS never evaluated), and "1e3" or "0x50" as numbers.
 */
const wholeNumber = (min: number, max: number) => {
  const message = `must be a whole number from ${min} to ${max}`;
  return z.string().trim().regex(/^\d+$/, message).transform(Number).pipe(z.number().min(min, message).max(max, message));
};

/** A number of decimal digits with an optional fraction (RESPONSE_CACHE_MB=0.5). */
const decimalNumber = (min: number, max: number) => {
  const message = `must be a number from ${min} to ${max}`;
  return z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?$/, message)
    .transform(Number)
    .pipe(z.number().min(min, message).max(max, message));
};

const Env = z.object({
  ROLE: z.enum(ROLES).default('all'),
  PORT: wholeNumber(0, 65535).default(8080),
  HOST: z.string().default('127.0.0.1'),
  DATA_DIR: z.string().default('./data'),
  EVENTSTORE_URL: url(['esdb:', 'esdb+discover:', 'kurrentdb:', 'kurrentdb+discover:', 'kdb:']).optional(),
  MONGODB_URL: url(['mongodb:', 'mongodb+srv:']).optional(),
  /** PostgreSQL: the event store where EVENTSTORE_URL is unset, the read models where MONGODB_URL is. */
  DATABASE_URL: url(['postgres:', 'postgresql:']).optional(),
  /** One Redis (redis://, rediss://) or a Redis Cluster by some of its nodes (redis+cluster://host:port[,host:port…]). */
  REDIS_URL: redisUrl.optional(),
  /** Usage records are spread over this many Redis streams by account (default 1 on one Redis, 16 on a cluster); never lower it while records wait. */
  USAGE_STREAMS: wholeNumber(1, 1024).optional(),
  /** With Redis: a turn's usage records must reach this many replicas of their master (WAIT) before their calls are answered; 0: the master's acknowledgement. */
  REDIS_USAGE_WAIT_REPLICAS: wholeNumber(0, 64).default(0),
  /** How long that WAIT waits at most; short of replicas by then, the answers leave all the same (counted). */
  REDIS_USAGE_WAIT_MS: wholeNumber(1, 10_000).default(100),
  PLANS_CONFIG: z.string().optional(),
  ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /**
   * The gateways' shared secret in the keys of the filter ids' tags (src/gateway/upstreams/filters.ts):
   * the same on every gateway; unset, the tags are keyed by each node's configuration alone. At
   * least 32 characters: a caller sees tags and what they were made of, so a short one can be
   * guessed offline, unlike ADMIN_TOKEN, guessed one request at a time.
   */
  FILTER_ID_SECRET: z.string().min(32, 'must be at least 32 characters (a random string, e.g. `openssl rand -hex 32`)').optional(),
  /** `off` to not start the embedded EVM devnet for the `local` chain. */
  LOCAL_DEVNET: z.enum(['on', 'off']).default('on'),
  LIMITS_FAIL_CLOSED: z.enum(['true', 'false']).default('false'),
  /**
   * The embedded default (no EventStoreDB, MongoDB or Redis): `on` runs its stores, the usage
   * ingester and the projector on a thread of their own; `off` keeps them on the main thread.
   */
  STORAGE_THREAD: z.enum(['on', 'off']).default('on'),
  /**
   * How long the embedded default's gateway gathers usage records before sending them on
   * together to the storage thread: longer costs the event loop less per record. Nothing is lost
   * should the process be killed meanwhile (the usage journal has them). Redis mode sends at the
   * end of each event-loop turn whatever it says: answers wait for Redis's acknowledgement.
   */
  USAGE_SEND_MS: wholeNumber(1, 10_000).default(20),
  /**
   * How long the projector lets a live batch of usage events gather more before it commits it:
   * each roll-up a batch touches is written once for all its calls (shorter: fresher metrics for
   * more writes). Nobody waits on it but a reader of the metrics.
   */
  USAGE_LINGER_MS: wholeNumber(0, 10_000).default(250),
  /**
   * The embedded default's usage journal (DATA_DIR/usage-journal) outlives a killed process as
   * it is; `always` syncs each event-loop turn's write to the disk, so it outlives a power loss too.
   */
  USAGE_JOURNAL_FSYNC: z.enum(['always', 'off']).default('off'),
  /**
   * Slow clients are cut off (answered 408, connection closed): the time a client has to send a
   * request's headers, and the whole request with its body. The latter includes the former.
   */
  HEADERS_TIMEOUT_MS: wholeNumber(100, 600_000).default(10_000),
  REQUEST_TIMEOUT_MS: wholeNumber(100, 3_600_000).default(30_000),
  /**
   * How long a keep-alive connection may stay idle between requests. Behind a proxy or load
   * balancer it must exceed the proxy's own idle timeout for its upstream connections (nginx's
   * `keepalive_timeout` and AWS ALB's: 60 s), or the proxy may send a request on a connection
   * this server is closing and answer its client 502.
   */
  KEEP_ALIVE_TIMEOUT_MS: wholeNumber(100, 3_600_000).default(72_000),
  /** Chain calls: the calls one JSON-RPC batch may hold, and the bytes of one request body or WebSocket frame; beyond, 413 (1009 on a socket). */
  MAX_BATCH_CALLS: wholeNumber(1, 10_000).default(DEFAULT_GATEWAY_LIMITS.maxBatch),
  MAX_BODY_BYTES: wholeNumber(1024, 64 * MIB).default(DEFAULT_GATEWAY_LIMITS.maxBodyBytes),
  /** Bytes (MiB) of the gateway's in-process response cache of chain answers; 0 turns it off. */
  RESPONSE_CACHE_MB: decimalNumber(0, 1_048_576).default(DEFAULT_CACHE_BYTES / MIB),
  /**
   * `on`: gateways also share the answers that can never change (final blocks, by hash, chain id)
   * through Redis, a second level under the in-process cache (src/gateway/cache/sharedCache.ts).
   */
  RESPONSE_CACHE_REDIS: z.enum(['on', 'off']).default('off'),
  /** The shared cache's own Redis (e.g. one evicting least recently used keys); REDIS_URL by default. */
  RESPONSE_CACHE_REDIS_URL: redisUrl.optional(),
  /** WebSocket: a ping this often (a socket that missed the previous pong is cut off), and a socket with no subscription that sent nothing this long is closed (4000). */
  WS_PING_INTERVAL_MS: wholeNumber(100, 600_000).default(30_000),
  WS_IDLE_TIMEOUT_MS: wholeNumber(100, 86_400_000).default(300_000),
  /** With Redis: a gateway instance that stops (a crash) has its WebSocket connections uncounted within this; each live one refreshes its counts every third of it. */
  WS_INSTANCE_TTL_MS: wholeNumber(300, 600_000).default(15_000),
  /** How long to wait at start for Redis, EventStoreDB, MongoDB and PostgreSQL to answer before giving up. */
  STARTUP_TIMEOUT_SECONDS: wholeNumber(1, 3600).default(60),
  SECURE_COOKIES: z.enum(['true', 'false']).default('false'),
  /** Behind a reverse proxy: take the client IP from X-Forwarded-For. */
  TRUST_PROXY: z.enum(['true', 'false']).default('false'),
  /** Failed log-ins allowed per email and, apart, per client address within LOGIN_WINDOW_SECONDS; then 429 until the window ends. */
  LOGIN_MAX_FAILURES: wholeNumber(1, 1_000_000).default(DEFAULT_AUTH_LIMITS.loginFailures.limit),
  LOGIN_WINDOW_SECONDS: wholeNumber(1, 86_400).default(DEFAULT_AUTH_LIMITS.loginFailures.windowMs / 1000),
  /** Sign-ups allowed per client address within SIGNUP_WINDOW_SECONDS. */
  SIGNUP_MAX_PER_ADDRESS: wholeNumber(1, 1_000_000).default(DEFAULT_AUTH_LIMITS.signUps.limit),
  SIGNUP_WINDOW_SECONDS: wholeNumber(1, 86_400).default(DEFAULT_AUTH_LIMITS.signUps.windowMs / 1000),
  /** Password hashes (scrypt) computed at once by the process; the others queue, leaving libuv's other pool threads to the stores. */
  PASSWORD_HASH_CONCURRENCY: wholeNumber(1, 64).default(DEFAULT_HASH_CONCURRENCY),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Alerts: seconds between evaluations (0: only on demand, as the tests do). */
  ALERT_EVALUATION_INTERVAL_SECONDS: wholeNumber(0, 3600).default(30),
  /** Email notifications go through this SMTP server; without it they are appended to the outbox file. */
  SMTP_URL: url(['smtp:', 'smtps:']).optional(),
  NOTIFY_EMAIL_FROM: z.string().min(3).default('Chain Gateway <alerts@localhost>'),
  /** The outbox file (NDJSON); `<DATA_DIR>/outbox.ndjson` by default. */
  NOTIFY_OUTBOX: z.string().optional(),
  /** Let owner-given notification URLs reach private, loopback and link-local addresses (tests, closed networks). */
  NOTIFY_ALLOW_PRIVATE: z.enum(['true', 'false']).default('false'),
  NOTIFY_TIMEOUT_MS: wholeNumber(100, 60_000).default(10_000),
  NOTIFY_MAX_ATTEMPTS: wholeNumber(1, 20).default(8),
  /** Delay before the first retry; each later one is 3× longer (with jitter), up to an hour. */
  NOTIFY_RETRY_BASE_MS: wholeNumber(1, 3_600_000).default(5000),
  /** A PagerDuty Events API v2 compatible service for the incident channel. */
  INCIDENT_EVENTS_URL: url(['http:', 'https:']).default('https://events.pagerduty.com'),
  /** A Twilio-compatible Messages API for the SMS channel; SMS is skipped until the three credentials are set. */
  SMS_API_URL: url(['http:', 'https:']).default('https://api.twilio.com'),
  SMS_ACCOUNT_SID: z.string().min(1).optional(),
  SMS_AUTH_TOKEN: z.string().min(1).optional(),
  SMS_FROM: z.string().min(1).optional(),
});

export interface Config {
  role: Role;
  port: number;
  host: string;
  dataDir: string;
  eventstoreUrl: string | undefined;
  mongodbUrl: string | undefined;
  /** PostgreSQL (DATABASE_URL): serves the event store and the read models that have no URL of their own. */
  databaseUrl: string | undefined;
  redisUrl: string | undefined;
  /** Redis streams the usage records are spread over (USAGE_STREAMS); unset: the default for REDIS_URL's kind. */
  usageStreams?: number;
  /** Replicas a turn's usage records must reach before their calls are answered (REDIS_USAGE_WAIT_REPLICAS; 0: none), and the WAIT's bound (REDIS_USAGE_WAIT_MS). */
  redisUsageWait: { replicas: number; timeoutMs: number };
  plans: PlanCatalog;
  adminToken: string | null;
  localDevnet: boolean;
  limitsFailClosed: boolean;
  /** The embedded default's stores, ingester and projector on a thread of their own (STORAGE_THREAD). */
  storageThread: boolean;
  /** How long the embedded gateway gathers usage records before sending them on together to the storage thread (USAGE_SEND_MS). */
  usageSendEveryMs: number;
  /** How long a live batch of usage events gathers more before the projector commits it (USAGE_LINGER_MS). */
  usageLingerMs: number;
  /** Sync the usage journal's writes to the disk (USAGE_JOURNAL_FSYNC=always). */
  usageJournalFsync: boolean;
  /** How long to wait at start for the production services (STARTUP_TIMEOUT_SECONDS). */
  startupTimeoutMs: number;
  /** How long a client may take to send its headers and its whole request, and stay idle between requests (HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS). */
  http: { headersTimeoutMs: number; requestTimeoutMs: number; keepAliveTimeoutMs: number };
  /** The most calls in one JSON-RPC batch and bytes in one chain call's body (MAX_BATCH_CALLS, MAX_BODY_BYTES). */
  gatewayLimits: GatewayLimits;
  /** The response cache's bound in bytes (RESPONSE_CACHE_MB); 0: no cache. */
  responseCacheBytes: number;
  /** Where the response cache's shared level lives (RESPONSE_CACHE_REDIS=on); null: in process only. */
  responseCacheRedisUrl: string | null;
  /** The secret mixed into the keys of the filter ids' tags (FILTER_ID_SECRET); null: none, the keys as before it existed. */
  filterIdSecret: string | null;
  /** WebSocket keepalive (WS_PING_INTERVAL_MS) and idle timeout (WS_IDLE_TIMEOUT_MS). */
  webSockets: { pingEveryMs: number; idleTimeoutMs: number };
  /** With Redis, how long a vanished gateway instance's WebSocket connections still count against the caps (WS_INSTANCE_TTL_MS). */
  wsInstanceTtlMs: number;
  secureCookies: boolean;
  trustProxy: boolean;
  /** Log-in and sign-up limits, and how many password hashes run at once. */
  auth: AuthLimits & { hashConcurrency: number };
  logLevel: string;
  /** The environment, for the chain registry's CHAINS_CONFIG and UPSTREAM_<ID> overrides. */
  env: Record<string, string | undefined>;
  /** Alert evaluation (0: only on demand). */
  alerts: { evaluateEveryMs: number };
  /** Notification channels (src/infra/notify). */
  notify: NotifyConfig;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Reads and checks the whole configuration at start: a bad value stops the process with its name. */
export function loadConfig(env: Record<string, string | undefined> = process.env, roleArg?: string): Config {
  // Set but empty (`PORT=`, an unset variable expanded in a unit or compose file) is a mistake, not
  // a value: "" listened on every interface as HOST, put the data in the working directory as DATA_DIR.
  const empty = [...Object.keys(Env.shape), 'CHAINS_CONFIG'].filter(
    (name) => env[name] !== undefined && env[name]?.trim() === '' && !(name === 'ROLE' && roleArg !== undefined),
  );
  if (empty.length > 0) {
    throw new ConfigError(
      `${empty.join(', ')} ${empty.length === 1 ? 'is' : 'are'} set but empty: give ${empty.length === 1 ? 'it a value' : 'each a value'}, or unset ${empty.length === 1 ? 'it' : 'them'} for the default.`,
    );
  }
  // A chain's nodes set but empty (`UPSTREAM_ETH=${ETH_URL}` with ETH_URL unset) were read as
  // unset: the chain file's nodes, public providers the operator had not chosen, got its calls.
  const emptyNodes = Object.keys(env).filter((name) => name.startsWith('UPSTREAM_') && env[name]?.trim() === '');
  if (emptyNodes.length > 0) {
    const one = emptyNodes.length === 1;
    throw new ConfigError(
      `${emptyNodes.join(', ')} ${one ? 'is' : 'are'} set but empty: give ${one ? 'it' : 'each'} the chain's node URLs (url[,url…]), or unset ${one ? 'it' : 'them'} for the nodes of the chain config (config/chains.json or CHAINS_CONFIG).`,
    );
  }
  const parsed = Env.safeParse({ ...env, ROLE: roleArg ?? env.ROLE });
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
  }
  const e = parsed.data;
  let plans: PlanCatalog;
  try {
    plans = planCatalog(e.PLANS_CONFIG ? JSON.parse(readFileSync(resolve(e.PLANS_CONFIG), 'utf8')) : {});
  } catch (err) {
    // A zod error's message is its issues as indented JSON: one line, each issue by its place in the file.
    const reason =
      err instanceof z.ZodError
        ? err.issues.map((i) => `${i.path.length === 0 ? '(the whole file)' : i.path.join('.')}: ${i.message}`).join('; ')
        : err instanceof Error
          ? err.message
          : String(err);
    throw new ConfigError(`PLANS_CONFIG (${e.PLANS_CONFIG}): ${reason}`);
  }
  if (e.HEADERS_TIMEOUT_MS > e.REQUEST_TIMEOUT_MS) {
    throw new ConfigError(
      `HEADERS_TIMEOUT_MS (${e.HEADERS_TIMEOUT_MS}) must not exceed REQUEST_TIMEOUT_MS (${e.REQUEST_TIMEOUT_MS}): a request's time includes its headers'.`,
    );
  }
  // The embedded stores are LevelDB directories that one process at a time can open.
  if (e.ROLE !== 'all') {
    const missing = [
      ...(e.EVENTSTORE_URL || e.DATABASE_URL ? [] : ['an event store (EVENTSTORE_URL or DATABASE_URL)']),
      ...(e.MONGODB_URL || e.DATABASE_URL ? [] : ['read models (MONGODB_URL or DATABASE_URL)']),
      ...(e.REDIS_URL ? [] : ['REDIS_URL']),
    ];
    if (missing.length > 0) {
      throw new ConfigError(
        `ROLE=${e.ROLE} runs beside other roles and needs EVENTSTORE_URL, MONGODB_URL and REDIS_URL (DATABASE_URL may stand for either of the first two); missing: ${missing.join(', ')}. The embedded default runs only as ROLE=all.`,
      );
    }
  }
  const responseCacheRedisUrl = e.RESPONSE_CACHE_REDIS === 'on' ? (e.RESPONSE_CACHE_REDIS_URL ?? e.REDIS_URL ?? null) : null;
  if (e.RESPONSE_CACHE_REDIS === 'on' && responseCacheRedisUrl === null) {
    throw new ConfigError('RESPONSE_CACHE_REDIS=on shares answers through Redis: it needs REDIS_URL (or RESPONSE_CACHE_REDIS_URL).');
  }
  if (e.RESPONSE_CACHE_REDIS === 'on' && e.RESPONSE_CACHE_MB === 0) {
    throw new ConfigError('RESPONSE_CACHE_REDIS=on is a second level under the in-process response cache: it needs RESPONSE_CACHE_MB above 0.');
  }
  // The chain registry is checked now too, so a broken one stops the process before anything starts.
  if (e.ROLE === 'all' || e.ROLE === 'gateway') loadChains({ env });
  return {
    role: e.ROLE,
    port: e.PORT,
    host: e.HOST,
    dataDir: resolve(e.DATA_DIR),
    eventstoreUrl: e.EVENTSTORE_URL,
    mongodbUrl: e.MONGODB_URL,
    databaseUrl: e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    ...(e.USAGE_STREAMS === undefined ? {} : { usageStreams: e.USAGE_STREAMS }),
    redisUsageWait: { replicas: e.REDIS_USAGE_WAIT_REPLICAS, timeoutMs: e.REDIS_USAGE_WAIT_MS },
    plans,
    adminToken: e.ADMIN_TOKEN ?? null,
    localDevnet: e.LOCAL_DEVNET === 'on',
    limitsFailClosed: e.LIMITS_FAIL_CLOSED === 'true',
    storageThread: e.STORAGE_THREAD === 'on',
    usageSendEveryMs: e.USAGE_SEND_MS,
    usageLingerMs: e.USAGE_LINGER_MS,
    usageJournalFsync: e.USAGE_JOURNAL_FSYNC === 'always',
    startupTimeoutMs: e.STARTUP_TIMEOUT_SECONDS * 1000,
    http: { headersTimeoutMs: e.HEADERS_TIMEOUT_MS, requestTimeoutMs: e.REQUEST_TIMEOUT_MS, keepAliveTimeoutMs: e.KEEP_ALIVE_TIMEOUT_MS },
    gatewayLimits: { maxBatch: e.MAX_BATCH_CALLS, maxBodyBytes: e.MAX_BODY_BYTES },
    responseCacheBytes: Math.floor(e.RESPONSE_CACHE_MB * MIB),
    responseCacheRedisUrl,
    filterIdSecret: e.FILTER_ID_SECRET ?? null,
    webSockets: { pingEveryMs: e.WS_PING_INTERVAL_MS, idleTimeoutMs: e.WS_IDLE_TIMEOUT_MS },
    wsInstanceTtlMs: e.WS_INSTANCE_TTL_MS,
    secureCookies: e.SECURE_COOKIES === 'true',
    trustProxy: e.TRUST_PROXY === 'true',
    auth: {
      loginFailures: { limit: e.LOGIN_MAX_FAILURES, windowMs: e.LOGIN_WINDOW_SECONDS * 1000 },
      signUps: { limit: e.SIGNUP_MAX_PER_ADDRESS, windowMs: e.SIGNUP_WINDOW_SECONDS * 1000 },
      hashConcurrency: e.PASSWORD_HASH_CONCURRENCY,
    },
    logLevel: e.LOG_LEVEL,
    env,
    alerts: { evaluateEveryMs: e.ALERT_EVALUATION_INTERVAL_SECONDS * 1000 },
    notify: {
      allowPrivate: e.NOTIFY_ALLOW_PRIVATE === 'true',
      timeoutMs: e.NOTIFY_TIMEOUT_MS,
      email: { smtpUrl: e.SMTP_URL ?? null, from: e.NOTIFY_EMAIL_FROM, outboxPath: resolve(e.NOTIFY_OUTBOX ?? join(e.DATA_DIR, 'outbox.ndjson')) },
      incident: { eventsUrl: e.INCIDENT_EVENTS_URL },
      sms: { apiUrl: e.SMS_API_URL, accountSid: e.SMS_ACCOUNT_SID ?? null, authToken: e.SMS_AUTH_TOKEN ?? null, from: e.SMS_FROM ?? null },
      maxAttempts: e.NOTIFY_MAX_ATTEMPTS,
      retryBaseMs: e.NOTIFY_RETRY_BASE_MS,
    },
  };
}
