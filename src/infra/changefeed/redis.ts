import { Cluster, Redis } from 'ioredis';
import { closeClient, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import { safely } from './memory.js';
import { type ChangeFeed, FEED_RESUMED } from './port.js';

type Handler = (message: string) => void;

/** Topics live under this channel prefix, apart from anything else on the same Redis. */
const CHANNEL_PREFIX = 'changefeed:';

/**
 * Change feed on Redis pub/sub. Subscribing takes a connection of its own (a subscribed RESP2
 * connection can do nothing else); ioredis subscribes it again to every channel after a
 * reconnect. Messages published while a subscriber is disconnected are lost (pub/sub keeps
 * nothing): once subscribed again after a reconnect (on a cluster, through a new subscriber
 * connection), every handler hears FEED_RESUMED, so a cache fed by this drops what it holds
 * rather than serve a revoked token until its entry goes stale.
 *
 * On a Redis Cluster, plain PUBLISH, which the cluster bus carries to every node, not sharded
 * pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7): the feed carries a few messages a minute (token and
 * plan changes), so sending each to every node costs nothing that matters, and ioredis's
 * cluster subscriber is one connection that moves to another node and subscribes again when
 * its node goes, where its sharded subscribers (one per master, opt-in in 5.x) are newer and
 * would lose a topic's messages while its master is down.
 */
export class RedisChangeFeed implements ChangeFeed {
  private readonly publisher: RedisClient;
  private readonly subscriber: RedisClient;
  private readonly handlers = new Map<string, Set<Handler>>();
  /** The SUBSCRIBE of each topic, so a second subscriber waits for it too. */
  private readonly subscribed = new Map<string, Promise<unknown>>();

  constructor(redisUrl: string) {
    // A publish while Redis is away fails after one retry rather than waiting for it.
    this.publisher = redisClient(redisUrl, { maxRetriesPerRequest: 1 });
    this.subscriber = redisClient(redisUrl, { autoResubscribe: true });
    this.subscriber.on('message', (channel: string, message: string) => {
      const handlers = this.handlers.get(channel.slice(CHANNEL_PREFIX.length));
      for (const handler of handlers ?? []) safely(handler, message);
    });
    const connection = this.subscriber instanceof Cluster ? subscriberConnection(this.subscriber) : null;
    if (connection) {
      this.followClusterSubscriber(this.subscriber as Cluster, connection);
    } else {
      // One server (or a cluster client without the internal below): its 'ready' after the first is a reconnect.
      this.subscriber.on('ready', this.resumeAfterFirstReady());
    }
  }

  /** A 'ready' listener: the first 'ready' it hears is the subscription made, every later one a resubscription after a gap. */
  private resumeAfterFirstReady(): () => void {
    let connected = false;
    return () => {
      if (connected) void this.resumed();
      connected = true;
    };
  }

  /** Looks for a new cluster subscriber connection to follow (nothing on one server). */
  private followSubscriber: () => void = () => {};

  /**
   * On a cluster, SUBSCRIBE goes through one connection that ioredis's ClusterSubscriber owns: it
   * does not reconnect it but, when it ends (killed, its node gone), makes a new one to a node
   * it picks and subscribes that one to the channels, telling nobody; the Cluster client stays
   * 'ready' throughout. So each connection it makes is followed here: the first to become ready
   * subscribed us, each later one is a resubscription after a gap. A new connection is looked
   * for when the followed one ends (ClusterSubscriber's own 'end' listener, registered first,
   * has made the next one by then), when the cluster is ready again (it made one on connecting),
   * when a node comes or goes (it picks another), and after each SUBSCRIBE of ours.
   */
  private followClusterSubscriber(cluster: Cluster, connection: () => Redis | null): void {
    const followed = new WeakSet<Redis>();
    // One listener for every connection: the first to become ready subscribed us, each later one resubscribed.
    const onReady = this.resumeAfterFirstReady();
    const follow = (): void => {
      const current = connection();
      if (!current || followed.has(current)) return;
      followed.add(current);
      current.on('ready', onReady);
      current.on('end', follow);
    };
    this.followSubscriber = follow;
    cluster.on('ready', follow);
    // Emitted before ClusterSubscriber's own listener (on the pool) picks another connection.
    const later = (): void => process.nextTick(follow);
    cluster.on('+node', later).on('-node', later);
  }

  /**
   * After a reconnect: ioredis has sent its SUBSCRIBE again; once ours, sent after it, is answered,
   * every message published from now on arrives, and each handler hears that some may have been lost.
   */
  private async resumed(): Promise<void> {
    const topics = [...this.handlers.keys()];
    if (topics.length === 0) return;
    try {
      await this.subscriber.subscribe(...topics.map((topic) => CHANNEL_PREFIX + topic));
    } catch {
      return; // Gone again: the next 'ready' tries again.
    }
    for (const topic of topics) for (const handler of this.handlers.get(topic) ?? []) safely(handler, FEED_RESUMED);
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await Promise.all([waitForReady(this.publisher, timeoutMs), waitForReady(this.subscriber, timeoutMs)]);
  }

  async publish(topic: string, message: string): Promise<void> {
    await this.publisher.publish(CHANNEL_PREFIX + topic, message);
  }

  async subscribe(topic: string, handler: Handler): Promise<() => Promise<void>> {
    let handlers = this.handlers.get(topic);
    if (!handlers) {
      handlers = new Set();
      this.handlers.set(topic, handlers);
      this.subscribed.set(topic, this.subscriber.subscribe(CHANNEL_PREFIX + topic));
      this.followSubscriber();
    }
    // A distinct wrapper per call: the same function subscribed twice is unsubscribed once each.
    const own: Handler = (message) => handler(message);
    handlers.add(own);
    await this.subscribed.get(topic);
    return async () => {
      const current = this.handlers.get(topic);
      if (!current?.delete(own) || current.size > 0) return;
      this.handlers.delete(topic);
      this.subscribed.delete(topic);
      await this.subscriber.unsubscribe(CHANNEL_PREFIX + topic);
    };
  }

  async close(): Promise<void> {
    this.handlers.clear();
    this.subscribed.clear();
    await Promise.all([closeClient(this.publisher), closeClient(this.subscriber)]);
  }
}

/**
 * The connection a cluster client subscribes through now, read from ioredis 5's internal
 * ClusterSubscriber (`cluster.subscriber.getInstance()`, private in its types; it has no public
 * event for a new one, only the sharded subscribers have). Null when that internal is not there
 * (another ioredis): the feed then listens to the Cluster's own 'ready', as before, and a lost
 * message while the subscriber moved is covered only by the cache's TTL.
 */
function subscriberConnection(cluster: Cluster): (() => Redis | null) | null {
  const internal: unknown = Reflect.get(cluster, 'subscriber');
  if (typeof internal !== 'object' || internal === null) return null;
  const getInstance: unknown = Reflect.get(internal, 'getInstance');
  if (typeof getInstance !== 'function') return null;
  return () => {
    const instance: unknown = getInstance.call(internal);
    return instance instanceof Redis ? instance : null;
  };
}
