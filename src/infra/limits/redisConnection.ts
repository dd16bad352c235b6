import { Redis, type RedisOptions } from 'ioredis';

/**
 * How this project's Redis adapters (limiter, usage queue, change feed) connect: RESP2 (reply
 * shapes as documented everywhere; ioredis 6 defaults to RESP3), reconnect forever at most
 * a second apart, and errors reported to the caller rather than printed by ioredis.
 */
export function connectRedis(redisUrl: string, overrides: RedisOptions = {}): Redis {
  const client = new Redis(redisUrl, {
    protocol: 2,
    retryStrategy: (attempt) => Math.min(50 * attempt, 1000),
    ...overrides,
  });
  // Connection errors surface as failed commands; without a listener ioredis prints each one.
  client.on('error', () => {});
  return client;
}

/** Options for a client that must fail at once while disconnected rather than queue commands. */
export const FAIL_FAST: RedisOptions = { enableOfflineQueue: false, maxRetriesPerRequest: 0 };

/** Resolves when the client is connected and ready for commands, or rejects after `timeoutMs`. */
export async function waitForReady(client: Redis, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`redis not ready after ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    client.once('ready', onReady);
  });
}

/** QUIT when connected (replies in flight still arrive), otherwise just drop the socket. */
export async function closeClient(client: Redis): Promise<void> {
  if (client.status === 'ready') {
    await client.quit().catch(() => client.disconnect());
  } else {
    client.disconnect();
  }
}
