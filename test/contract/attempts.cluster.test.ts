import { afterAll, beforeAll } from 'vitest';
import { RedisAttemptCounter } from '../../src/infra/attempts/index.js';
import { startTestRedisCluster, type TestRedisCluster } from '../support/redisCluster.js';
import { attemptCounterContract } from './attempts.contract.js';

let cluster: TestRedisCluster;
beforeAll(async () => {
  cluster = await startTestRedisCluster();
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

attemptCounterContract('redis cluster', async () => {
  const counter = new RedisAttemptCounter(cluster.url, { commandTimeoutMs: 2000 });
  await counter.whenReady();
  return counter;
});
