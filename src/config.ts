import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { type PlanCatalog, planCatalog } from './domain/plans.js';

export const ROLES = ['all', 'gateway', 'api', 'projector'] as const;
export type Role = (typeof ROLES)[number];

const url = (protocols: string[]) =>
  z.string().refine((v) => {
    try {
      return protocols.includes(new URL(v).protocol);
    } catch {
      return false;
    }
  }, `must be a URL (${protocols.join(' or ')})`);

const Env = z.object({
  ROLE: z.enum(ROLES).default('all'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default('127.0.0.1'),
  DATA_DIR: z.string().default('./data'),
  EVENTSTORE_URL: url(['esdb:', 'esdb+discover:', 'kurrentdb:', 'kurrentdb+discover:', 'kdb:']).optional(),
  MONGODB_URL: url(['mongodb:', 'mongodb+srv:']).optional(),
  REDIS_URL: url(['redis:', 'rediss:']).optional(),
  PLANS_CONFIG: z.string().optional(),
  ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** `off` to not start the embedded EVM devnet for the `local` chain. */
  LOCAL_DEVNET: z.enum(['on', 'off']).default('on'),
  LIMITS_FAIL_CLOSED: z.enum(['true', 'false']).default('false'),
  SECURE_COOKIES: z.enum(['true', 'false']).default('false'),
  /** Behind a reverse proxy: take the client IP from X-Forwarded-For. */
  TRUST_PROXY: z.enum(['true', 'false']).default('false'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export interface Config {
  role: Role;
  port: number;
  host: string;
  dataDir: string;
  eventstoreUrl: string | undefined;
  mongodbUrl: string | undefined;
  redisUrl: string | undefined;
  plans: PlanCatalog;
  adminToken: string | null;
  localDevnet: boolean;
  limitsFailClosed: boolean;
  secureCookies: boolean;
  trustProxy: boolean;
  logLevel: string;
  /** The environment, for the chain registry's CHAINS_CONFIG and UPSTREAM_<ID> overrides. */
  env: Record<string, string | undefined>;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Reads and checks the whole configuration at start: a bad value stops the process with its name. */
export function loadConfig(env: Record<string, string | undefined> = process.env, roleArg?: string): Config {
  const parsed = Env.safeParse({ ...env, ROLE: roleArg ?? env.ROLE });
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
  }
  const e = parsed.data;
  let plans: PlanCatalog;
  try {
    plans = planCatalog(e.PLANS_CONFIG ? JSON.parse(readFileSync(resolve(e.PLANS_CONFIG), 'utf8')) : {});
  } catch (err) {
    throw new ConfigError(`PLANS_CONFIG (${e.PLANS_CONFIG}): ${err instanceof Error ? err.message : String(err)}`);
  }
  // The embedded stores are LevelDB directories that one process at a time can open.
  if (e.ROLE !== 'all' && (!e.EVENTSTORE_URL || !e.MONGODB_URL || !e.REDIS_URL)) {
    throw new ConfigError(`ROLE=${e.ROLE} runs beside other roles and needs EVENTSTORE_URL, MONGODB_URL and REDIS_URL; the embedded default runs only as ROLE=all.`);
  }
  return {
    role: e.ROLE, port: e.PORT, host: e.HOST, dataDir: resolve(e.DATA_DIR),
    eventstoreUrl: e.EVENTSTORE_URL, mongodbUrl: e.MONGODB_URL, redisUrl: e.REDIS_URL,
    plans, adminToken: e.ADMIN_TOKEN ?? null, localDevnet: e.LOCAL_DEVNET === 'on',
    limitsFailClosed: e.LIMITS_FAIL_CLOSED === 'true', secureCookies: e.SECURE_COOKIES === 'true', trustProxy: e.TRUST_PROXY === 'true',
    logLevel: e.LOG_LEVEL, env,
  };
}
