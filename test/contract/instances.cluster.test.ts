import { randomUUID } from 'node:crypto';
import { RedisGatewayInstances } from '../../src/infra/instances/redis.js';
import { clusterForThisFile } from '../support/redisCluster.js';
import { gatewayInstancesContract, sharedGatewayInstancesContract } from './instances.contract.js';

const cluster = clusterForThisFile();

gatewayInstancesContract('redis cluster', async () => {
  const instances = new RedisGatewayInstances(cluster().url, { key: `gateway:instances:${randomUUID()}`, commandTimeoutMs: 2_000 });
  await instances.whenReady();
  return instances;
});

sharedGatewayInstancesContract('redis cluster', () => cluster().url);
