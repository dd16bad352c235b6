import { RedisChangeFeed } from '../../src/infra/changefeed/redis.js';
import { clusterForThisFile } from '../support/redisCluster.js';
import { changeFeedContract } from './changefeed.contract.js';

const cluster = clusterForThisFile();

// Publisher and subscriber each reach the cluster through a node of their own choosing: a PUBLISH
// on one node reaches subscribers on every other.
changeFeedContract('redis cluster', async () => {
  const publisher = new RedisChangeFeed(cluster().url);
  const subscriber = new RedisChangeFeed(cluster().url);
  await Promise.all([publisher.whenReady(), subscriber.whenReady()]);
  return { publisher, subscriber };
});
