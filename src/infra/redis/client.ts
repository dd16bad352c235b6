import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { withinDeadline } from '../deadline.js';

/**
 * REDIS_URL names either one Redis (`redis://`, `rediss://`, as ioredis reads them) or a Redis
 * Cluster by some of its nodes: `redis+cluster://[user:password@]host:port[,host:port…]`
 * (`rediss+cluster://` with TLS). The nodes are seeds: the client learns the others, and which
 * slots each serves, from whichever answers first.
 */
export type RedisTarget = { kind: 'single'; url: string } | { kind: 'cluster'; nodes: RedisNode[]; username?: string; password?: string; tls: boolean };

export interface RedisNode {
  host: string;
  port: number;
}

/** A client of either: the adapters use only what both offer (keyed commands, scripts, pub/sub). */
export type RedisClient = Redis | Cluster;

const CLUSTER_URL = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#]+)\/?(?:0)?(?:[?#].*)?$/;
const SINGLE_PROTOCOLS = ['redis:', 'rediss:'];

/** What REDIS_URL names, or an error saying what is wrong with it. */
export function parseRedisUrl(url: string): RedisTarget {
  if (/^rediss?\+cluster:/.test(url)) {
    const match = CLUSTER_URL.exec(url);
    if (!match) throw new Error('a cluster URL is redis+cluster://[user:password@]host:port[,host:port…] (a cluster has no database but 0)');
    const [, scheme, userinfo, hostList] = match as unknown as [string, string, string | undefined, string];
    const nodes = hostList.split(',').map(parseNode);
    const colon = userinfo?.indexOf(':') ?? -1;
    const username = userinfo === undefined ? undefined : decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon));
    const password = userinfo === undefined || colon < 0 ? undefined : decodeURIComponent(userinfo.slice(colon + 1));
    return { kind: 'cluster', nodes, ...(username ? { username } : {}), ...(password ? { password } : {}), tls: scheme === 'rediss' };
  }
  let protocol: string;
  try {
    protocol = new URL(url).protocol;
  } catch {
    throw new Error('must be a URL (redis:, rediss:, redis+cluster: or rediss+cluster:)');
  }
  if (!SINGLE_PROTOCOLS.includes(protocol)) throw new Error(`must be a redis:, rediss:, redis+cluster: or rediss+cluster: URL, not ${protocol}`);
  return { kind: 'single', url };
}

function parseNode(hostPort: string): RedisNode {
  // [v6 address]:port, or host:port, or host alone.
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/.exec(hostPort.trim());
  const host = match?.[1] ?? match?.[2];
  const port = Number(match?.[3] ?? 6379);
  if (!host || port < 1 || port > 65535) throw new Error(`"${hostPort}" is not a cluster node's host:port`);
  return { host, port };
}

export const nodeName = (node: RedisNode): string => (node.host.includes(':') ? `[${node.host}]:${node.port}` : `${node.host}:${node.port}`);

/** The cluster slot of a key, as Redis computes it (its hash tag's or its own CRC16, modulo 16384): ioredis's own function. */
export const keySlot = (key: string): number => calculateSlot(key);

/** Every node a cluster client has heard of, its seeds first: one that is down at start may be gone from its slot map by the time the error is told. */
const seenNodes = new WeakMap<Cluster, Map<string, RedisNode>>();

/** How often a cluster client asks for the slot map again. */
const SLOTS_REFRESH_MS = 5000;

/** Reconnect forever, at most a second apart. */
const reconnectDelay = (attempt: number): number => Math.min(50 * attempt, 1000);

/**
 * The one place a Redis client is made from REDIS_URL, for every adapter: a `Redis` for one
 * server, a `Cluster` for a cluster, both reconnecting forever at most a second apart and
 * reporting errors to the caller rather than printing them. `overrides` are a connection's
 * options; on a cluster they apply to each node's connection, except `enableOfflineQueue`,
 * which is the cluster client's (a command sent while it is not ready fails at once).
 *
 * ioredis stays on 5.x, whose replies are RESP2's: ioredis 6 defines `class VerbatimString
 * extends String` for RESP3, and once any object has String.prototype as its prototype V8's
 * optimised code stops inlining string methods in the whole process (charCodeAt, slice,
 * startsWith...): a loop of charCodeAt over a request body ran 5× slower once ioredis 6 was
 * imported, and the gateway's JSON-RPC parse 3× slower (docs/decisions.md).
 */
export function redisClient(url: string, overrides: RedisOptions = {}): RedisClient {
  const target = parseRedisUrl(url);
  let client: RedisClient;
  if (target.kind === 'single') {
    client = new Redis(url, { retryStrategy: reconnectDelay, ...overrides });
  } else {
    const {
      enableOfflineQueue,
      retryStrategy: _retry,
      host: _host,
      port: _port,
      path: _path,
      sentinels: _sentinels,
      readOnly: _readOnly,
      ...nodeOptions
    } = overrides;
    client = new Cluster(target.nodes, {
      clusterRetryStrategy: reconnectDelay,
      enableOfflineQueue: enableOfflineQueue ?? true,
      // The slot map is otherwise refreshed only when a command is redirected or fails: the health
      // watcher, which sends none by key, would keep watching a master a failover replaced.
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      redisOptions: {
        ...nodeOptions,
        ...(target.username ? { username: target.username } : {}),
        ...(target.password ? { password: target.password } : {}),
        ...(target.tls ? { tls: {} } : {}),
      },
    });
    // A node that left the cluster or cannot be reached: its commands fail; the health watcher says which.
    client.on('node error', () => {});
    const seen = new Map(target.nodes.map((node) => [nodeName(node), node]));
    seenNodes.set(client, seen);
    client.on('+node', (node: Redis) => {
      const found = { host: String(node.options.host), port: Number(node.options.port) };
      seen.set(nodeName(found), found);
    });
  }
  // Connection errors surface as failed commands; without a listener ioredis prints each one.
  client.on('error', () => {});
  return client;
}

/** Options for a client that must fail at once while disconnected rather than queue commands. */
export const FAIL_FAST: RedisOptions = { enableOfflineQueue: false, maxRetriesPerRequest: 0 };

/** A command's reply as `pipeline.exec()` gives it: the error, or null and the value. */
export type Reply = [error: Error | null, value: unknown];

/**
 * The replies of commands already sent, in order, each its error or its value (what
 * `pipeline.exec()` answers), settled when all are. Used instead of ioredis pipelines: a
 * connection sends and answers its commands in order all the same (on a cluster, each node's
 * connection), and a pipeline's objects outlived their replies. In the gateway role, whose
 * usage queue sent one every 5 ms, they made ~80 % of what its young-generation collections
 * promoted (~217 against ~21 KB each, measured with --trace-gc-nvp at 1,000 calls/s) and
 * nearly doubled each pause. A cluster's pipelines must also keep to one slot; these need not.
 */
export async function replies(sent: Array<Promise<unknown>>): Promise<Reply[]> {
  const settled = await Promise.allSettled(sent);
  return settled.map((r): Reply => (r.status === 'fulfilled' ? [null, r.value] : [r.reason instanceof Error ? r.reason : new Error(String(r.reason)), null]));
}

/** At most this long of a cluster's wait for 'ready' goes to finding out why it is not (a quarter of a shorter wait). */
const DESCRIBE_MS = 1000;

/**
 * Resolves when the client is ready for commands, or rejects within `timeoutMs`. On a cluster,
 * ready means every master answers a PING: a master that does not would lose its slots'
 * commands; the error names it (and, when the cluster client is not ready at all, every seed or
 * known node that cannot be reached).
 *
 * The error comes within `timeoutMs`, its reason found out in the last part of it: the startup
 * wait gives each attempt `timeoutMs` and then gives up on it as "no answer", so a reason looked
 * for after the wait was never told. A cluster with a master down and not replaced (its state
 * `fail`) never gets ready, and every "Waiting for Redis" line and the final error said "no
 * answer within 5000 ms" instead of naming the master.
 */
export async function waitForReady(client: RedisClient, timeoutMs: number): Promise<void> {
  const started = Date.now();
  if (client.status !== 'ready') {
    const describeMs = client instanceof Cluster ? Math.min(DESCRIBE_MS, Math.floor(timeoutMs / 4)) : 0;
    try {
      await untilEvent(client, 'ready', timeoutMs - describeMs);
    } catch (error) {
      if (!(client instanceof Cluster)) throw error;
      // Half of what is left for the probes, whose connections may hang: the error still comes in time.
      const why = await describeUnreachable(client, Math.max(1, Math.floor(describeMs / 2)));
      throw new Error(`redis cluster not ready after ${Date.now() - started} ms${why}`);
    }
  }
  if (client instanceof Cluster) await everyMasterAnswers(client, Math.max(1, timeoutMs - (Date.now() - started)));
}

/** Waits for `event`; a timeout names the last connection error seen meanwhile (`connect ECONNREFUSED 127.0.0.1:6379`), what an operator needs. */
function untilEvent(client: RedisClient, event: string, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let lastError: string | null = null;
    const onError = (error: Error): void => {
      lastError = error.message;
    };
    const timer = setTimeout(() => {
      client.off(event, onEvent).off('error', onError);
      reject(new Error(`redis not ready after ${timeoutMs} ms${lastError ? `: ${lastError}` : ''}`));
    }, timeoutMs);
    const onEvent = (): void => {
      clearTimeout(timer);
      client.off('error', onError);
      resolve();
    };
    client.once(event, onEvent).on('error', onError);
  });
}

/** The masters of the cluster's slot map (each slot's first node), whether or not the client is connected to them. */
export function masterNodes(cluster: Cluster): RedisNode[] {
  const keys = new Set<string>();
  for (const nodes of cluster.slots) if (nodes?.[0]) keys.add(nodes[0]);
  return [...keys].map((key) => {
    const colon = key.lastIndexOf(':');
    return { host: key.slice(0, colon), port: Number(key.slice(colon + 1)) };
  });
}

/** A node's connection options as the cluster client's own (credentials, TLS), for a connection of one's own to it. */
export function nodeOptions(cluster: Cluster, node: RedisNode, overrides: RedisOptions = {}): RedisOptions {
  const { username, password, tls } = cluster.options.redisOptions ?? {};
  return { ...node, ...(username ? { username } : {}), ...(password ? { password } : {}), ...(tls ? { tls } : {}), ...overrides };
}

/** What a one-off connection to the node finds within `timeoutMs` in all: its cluster_state, or why it could not ask. */
async function probeNode(cluster: Cluster, node: RedisNode, timeoutMs: number): Promise<{ state: string } | { error: string }> {
  const deadline = Date.now() + timeoutMs;
  const probe = new Redis(nodeOptions(cluster, node, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: timeoutMs }));
  // The socket's error (ECONNREFUSED…) says more than the rejected connect's "Connection is closed.".
  let socketError: string | null = null;
  probe.on('error', (error: Error) => {
    socketError = error.message;
  });
  try {
    await withinDeadline(probe.connect(), timeoutMs, () => new Error('no answer'));
    const info = String(await withinDeadline(probe.cluster('INFO'), Math.max(1, deadline - Date.now()), () => new Error('no answer to CLUSTER INFO')));
    return { state: /cluster_state:(\w+)/.exec(info)?.[1] ?? 'unknown' };
  } catch (error) {
    return { error: socketError ?? ((error instanceof Error ? error.message : String(error)) || 'no answer') };
  } finally {
    probe.disconnect();
  }
}

/** Every master of the slot map must answer: the error names those that do not. */
async function everyMasterAnswers(cluster: Cluster, timeoutMs: number): Promise<void> {
  const nodes = masterNodes(cluster);
  if (nodes.length === 0) throw new Error('redis cluster: no slot served by any master');
  const found = await Promise.all(nodes.map((node) => probeNode(cluster, node, timeoutMs)));
  const failing = nodes.flatMap((node, i) => {
    const result = found[i];
    return result && 'error' in result ? [`${nodeName(node)} (${result.error})`] : [];
  });
  if (failing.length > 0) throw new Error(`redis cluster master unreachable: ${failing.join(', ')}`);
}

/** The seed and known nodes that cannot be reached, or the cluster's state when every one answers. */
async function describeUnreachable(cluster: Cluster, timeoutMs: number): Promise<string> {
  const known = [...(seenNodes.get(cluster)?.values() ?? [])];
  const found = await Promise.all(known.map((node) => probeNode(cluster, node, timeoutMs)));
  const unreachable: string[] = [];
  const states: string[] = [];
  for (const [i, node] of known.entries()) {
    const result = found[i];
    if (result && 'error' in result) unreachable.push(`${nodeName(node)} (${result.error})`);
    else if (result) states.push(`${result.state} at ${nodeName(node)}`);
  }
  if (unreachable.length > 0) return `; node unreachable: ${unreachable.join(', ')}`;
  return `; every node answers, cluster_state ${states.join(', ')}`;
}

/** QUIT when connected (replies in flight still arrive), otherwise just drop the connections. */
export async function closeClient(client: RedisClient): Promise<void> {
  if (client.status === 'ready') {
    await client.quit().catch(() => client.disconnect());
  } else {
    client.disconnect();
  }
}
