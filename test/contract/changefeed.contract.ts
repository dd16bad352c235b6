import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ChangeFeed } from '../../src/infra/changefeed/port.js';

/** Two feeds stand for two processes (two connections to one Redis, or two roles of one process). */
export interface FeedPair {
  publisher: ChangeFeed;
  subscriber: ChangeFeed;
}

/** Resolves with the messages once `count` arrived; rejects after `timeoutMs`. */
export function collect(count: number, timeoutMs = 1000): { handler: (m: string) => void; done: Promise<string[]> } {
  const got: string[] = [];
  let resolve: (messages: string[]) => void = () => {};
  const done = new Promise<string[]>((res, rej) => {
    resolve = res;
    setTimeout(() => rej(new Error(`only ${got.length}/${count} messages within ${timeoutMs} ms`)), timeoutMs);
  });
  const handler = (message: string): void => {
    got.push(message);
    if (got.length === count) resolve(got);
  };
  return { handler, done };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export function changeFeedContract(name: string, open: () => Promise<FeedPair>): void {
  describe(`ChangeFeed contract: ${name}`, () => {
    it('delivers a message published on one side to a subscriber on the other within 1 s', async () => {
      const { publisher, subscriber } = await open();
      const topic = `token-${randomUUID()}`;
      const { handler, done } = collect(2);
      await subscriber.subscribe(topic, handler);
      await publisher.publish(topic, 'revoked:tok1');
      await publisher.publish(topic, 'limits:tok2');
      expect(await done).toEqual(['revoked:tok1', 'limits:tok2']);
      await publisher.close();
      await subscriber.close();
    });

    it('delivers only the topic subscribed to, to every subscriber of it', async () => {
      const { publisher, subscriber } = await open();
      const topic = `token-${randomUUID()}`;
      const first = collect(1);
      const second = collect(1);
      const others: string[] = [];
      await subscriber.subscribe(topic, first.handler);
      await subscriber.subscribe(topic, second.handler);
      await subscriber.subscribe(`${topic}-other`, (message) => others.push(message));
      await publisher.publish(topic, 'hello');
      expect(await first.done).toEqual(['hello']);
      expect(await second.done).toEqual(['hello']);
      await sleep(50);
      expect(others).toEqual([]);
      await publisher.close();
      await subscriber.close();
    });

    it('stops delivering after unsubscribe, and keeps delivering to the other subscribers', async () => {
      const { publisher, subscriber } = await open();
      const topic = `token-${randomUUID()}`;
      const dropped: string[] = [];
      const firstArrived = collect(1);
      const kept = collect(2);
      const unsubscribe = await subscriber.subscribe(topic, (message) => {
        dropped.push(message);
        firstArrived.handler(message);
      });
      await subscriber.subscribe(topic, kept.handler);
      await publisher.publish(topic, 'one');
      await firstArrived.done;
      await unsubscribe();
      await publisher.publish(topic, 'two');
      expect(await kept.done).toEqual(['one', 'two']);
      await sleep(50);
      expect(dropped).toEqual(['one']);
      await publisher.close();
      await subscriber.close();
    });

    it('stops delivering a topic once its last subscriber left', async () => {
      const { publisher, subscriber } = await open();
      const topic = `token-${randomUUID()}`;
      const got: string[] = [];
      const unsubscribe = await subscriber.subscribe(topic, (message) => got.push(message));
      await unsubscribe();
      await publisher.publish(topic, 'nobody listens');
      await sleep(100);
      expect(got).toEqual([]);
      await publisher.close();
      await subscriber.close();
    });

    it('keeps delivering to others when a handler throws', async () => {
      const { publisher, subscriber } = await open();
      const topic = `token-${randomUUID()}`;
      const kept = collect(1);
      await subscriber.subscribe(topic, () => {
        throw new Error('handler bug');
      });
      await subscriber.subscribe(topic, kept.handler);
      await publisher.publish(topic, 'still here');
      expect(await kept.done).toEqual(['still here']);
      await publisher.close();
      await subscriber.close();
    });
  });
}
