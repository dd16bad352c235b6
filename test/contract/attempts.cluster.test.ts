import { RedisAttemptCounter } from '../../src/infra/attempts/index.js';
import { clusterForThisFile } from '../support/redisCluster.js';
import { attemptCounterContract } from './attempts.contract.js';

const cluster = clusterForThisFile();

attemptCounterContract('redis cluster', async () => {
  const counter = new RedisAttemptCounter(cluster().url, { commandTimeoutMs: 2000 });
  await counter.whenReady();
  return counter;
});
