import { RedisConnectionCounter } from '../../src/infra/wsconnections/redis.js';
import { clusterForThisFile } from '../support/redisCluster.js';
import { connectionCounterContract, sharedConnectionCounterContract } from './wsconnections.contract.js';

const cluster = clusterForThisFile();

// Each token's hash is one key: the suite's tokens spread over the three masters.
connectionCounterContract('redis cluster', async () => {
  const counter = new RedisConnectionCounter(cluster().url, { commandTimeoutMs: 2000 });
  await counter.whenReady();
  return counter;
});

sharedConnectionCounterContract('redis cluster', () => cluster().url);
