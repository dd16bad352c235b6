import { describe, it } from 'vitest';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import type { Limiter } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { expectRateHeldAcrossTwoProcesses } from '../support/hammer.js';
import { clusterForThisFile } from '../support/redisCluster.js';
import { limiterContract } from './limits.contract.js';

/** Generous command deadline: a loaded test machine must not turn a slow reply into a failure. */
const TEST_TIMEOUT_MS = 1000;

const cluster = clusterForThisFile();

const opened = (limiter: Limiter & { whenReady(): Promise<void> }) => limiter.whenReady().then(() => limiter);

// Each quota bucket's keys share a hash tag: the buckets of the suite spread over the three masters.
limiterContract('redis cluster', () => opened(new RedisLimiter(cluster().url, { commandTimeoutMs: TEST_TIMEOUT_MS })));
limiterContract('leased over redis cluster', () => opened(new LeasedLimiter(new RedisLimiter(cluster().url, { commandTimeoutMs: TEST_TIMEOUT_MS }))));

describe('Redis Cluster limiter across processes', () => {
  it('two gateway processes hammering one token never get more than rps granted within any second', async () => {
    await expectRateHeldAcrossTwoProcesses(cluster().url);
  }, 30_000);
});
