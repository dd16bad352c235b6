import { type Config, loadConfig } from '../../src/config.js';

/**
 * The service's configuration from the environment, with one bench-only twist: BENCH_ROLE=gateway
 * runs the production gateway role (ROLE=gateway: chain routes, token cache, limits and
 * metering in Redis; no ingester, projector or API) on the embedded read models, which a ROLE=all
 * process seeded before. ROLE=gateway proper needs MongoDB for its token read model, which these
 * machines lack; per call the code is the same. Validated as ROLE=all (the embedded stores are
 * allowed there), then run as the gateway role.
 */
export function benchConfig(env: Record<string, string | undefined>): Config {
  if (env.BENCH_ROLE !== 'gateway') return loadConfig(env);
  const config = loadConfig({ ...env, ROLE: 'all' });
  if (!config.redisUrl) throw new Error('BENCH_ROLE=gateway meters into Redis: set REDIS_URL');
  return { ...config, role: 'gateway' };
}
