import { Redis, type RedisOptions } from 'ioredis';

/**
 * How this project's Redis adapters (limiter, usage queue, change feed) connect: reconnect
 * forever at most a second apart, and errors reported to the caller rather than printed by
 * ioredis.
 *
 * ioredis stays on 5.x, whose replies are RESP2's: ioredis 6 defines `class VerbatimString
 * extends String` for RESP3, and once any object has String.prototype as its prototype V8's
 * optimised code stops inlining string methods in the whole process (charCodeAt, slice,
 * startsWith...): a loop of charCodeAt over a request body ran 5× slower once ioredis 6 was
 * imported, and the gateway's JSON-RPC parse 3× slower (docs/decisions.md).
 */
export function connectRedis(redisUrl: string, overrides: RedisOptions = {}): Redis {
  const client = new Redis(redisUrl, {
    retryStrategy: (attempt) => Math.min(50 * attempt, 1000),
    ...overrides,
  });
  // Connection errors surface as failed commands; without a listener ioredis prints each one.
  client.on('error', () => {});
  return client;
}

/** A command's reply as `pipeline.exec()` gives it: the error, or null and the value. */
export type Reply = [error: Error | null, value: unknown];

/**
 * The replies of commands already sent on one connection, in order, each its error or its value
 * (what `pipeline.exec()` answers), settled when all are. Used instead of ioredis pipelines: a
 * connection sends and answers its commands in order all the same, and a pipeline's objects
 * outlived their replies. In the gateway role, whose usage queue sent one every 5 ms, they made
 * ~80 % of what its young-generation collections promoted (~217 against ~21 KB each, measured
 * with --trace-gc-nvp at 1,000 calls/s) and nearly doubled each pause.
 */
export async function replies(sent: Array<Promise<unknown>>): Promise<Reply[]> {
  const settled = await Promise.allSettled(sent);
  return settled.map((r): Reply => (r.status === 'fulfilled' ? [null, r.value] : [r.reason instanceof Error ? r.reason : new Error(String(r.reason)), null]));
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
