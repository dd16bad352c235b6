import type { TestProject } from 'vitest/node';
import { startTestRedisServer, type TestRedisServer } from './redisServer.js';

/**
 * Tests talk to a real redis-server. Unless TEST_REDIS_URL names one, start a private one on a
 * free loopback port for the run and stop it at the end.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let redis: TestRedisServer | undefined;
  let url = process.env.TEST_REDIS_URL;
  if (!url) {
    redis = await startTestRedisServer();
    url = redis.url;
  }
  project.provide('redisUrl', url);
  return async () => {
    await redis?.stop();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}
