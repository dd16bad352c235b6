import { Cluster, Redis } from 'ioredis';
import { withinDeadline } from './deadline.js';
import { closeClient, FAIL_FAST, masterNodes, nodeName, nodeOptions, redisClient, waitForReady } from './redis/client.js';
import { redactUrl } from './startup.js';

/** `stalled`: connected, but a PING has gone unanswered past the threshold (a frozen or overloaded server). */
export type RedisState = 'up' | 'down' | 'stalled';

export interface RedisHealthSnapshot {
  state: RedisState;
  /** When it entered this state (ms since the epoch). */
  sinceMs: number;
  /** Why it is not up: the connection's last error, or the PING left unanswered; null while up. */
  reason: string | null;
  /** Times it went from up to down or stalled since this process started. */
  outages: number;
}

/** Where changes are told: one warning when an outage starts, one info when it ends (a pino logger fits). */
export interface HealthLog {
  warn(message: string): void;
  info(message: string): void;
}

export interface RedisHealthOptions {
  log: HealthLog;
  /** A PING is sent this often (one at a time: none while one is unanswered). */
  pingEveryMs?: number;
  /** A PING unanswered this long makes the state `stalled`. */
  stallAfterMs?: number;
}

/** One connection the watcher PINGs: the server's, or on a cluster one per master. */
interface Probe {
  /** How it is named in a reason: empty for the one server, `master host:port: ` on a cluster. */
  label: string;
  client: Redis;
  lastError: string | null;
  /** Why its last PING went unanswered, while it still is. */
  stalled: string | null;
  pinging: boolean;
}

/**
 * The health of this process's Redis, in one place. The adapters' connections (limiter, usage
 * queue, change feed) reach the same server with the same reconnect policy, and each copes with
 * an outage on its own without logging; this watches a connection of its own: its events say
 * when the server is unreachable (it reconnects like theirs) and a periodic PING when it is
 * connected but not answering, which no connection event reveals. An outage is logged once when
 * it starts, whatever it goes through (down, stalled, reconnect attempts), and once when it ends.
 *
 * On a cluster, every master of the slot map gets such a connection: one master down loses the
 * commands of its slots (a third of the limits and usage streams of a 3-master cluster) while the
 * cluster client itself stays ready, so the cluster is as healthy as its worst master, named in
 * the reason. The slot map is asked for again at every round of PINGs (one CLUSTER SLOTS a
 * second) and the masters taken from it, so a failover's new master is watched from the next
 * round on. The cluster client's own refresh (every 5 s) was too late: after a graceful failover
 * the watcher kept PINGing the former master, alive as a replica, and said `up` through the new
 * master's death; after a replica took over from a dead master it said `down` (and a fail-closed
 * gateway's /readyz 503) for up to 5 s while every slot was served again.
 */
export class RedisHealth {
  private readonly cluster: Cluster | null;
  private readonly probes = new Map<string, Probe>();
  private readonly target: string;
  private readonly log: HealthLog;
  private readonly stallAfterMs: number;
  private readonly timer: NodeJS.Timeout;
  private state: RedisState = 'down';
  private sinceMs = Date.now();
  private reason: string | null = 'not connected yet';
  /** Set once connected: not reaching Redis at start is the startup wait's to report, not an outage. */
  private wasUp = false;
  private outageStartedMs: number | null = null;
  private stopped = false;
  private outages = 0;

  constructor(redisUrl: string, options: RedisHealthOptions) {
    this.target = redactUrl(redisUrl);
    this.log = options.log;
    this.stallAfterMs = options.stallAfterMs ?? 2000;
    const client = redisClient(redisUrl, FAIL_FAST);
    if (client instanceof Cluster) {
      this.cluster = client;
      client.on('ready', () => this.watchMasters());
      client.on('refresh', () => this.watchMasters());
      client.on('close', () => this.assess());
    } else {
      this.cluster = null;
      this.addProbe('', '', client);
    }
    this.timer = setInterval(() => this.pingAll(), options.pingEveryMs ?? 1000);
    this.timer.unref();
  }

  snapshot(): RedisHealthSnapshot {
    // While down, the latest reconnect attempt's error says more than the one at the cut.
    const reason = this.state === 'down' ? (this.verdict().reason ?? this.reason) : this.reason;
    return { state: this.state, sinceMs: this.sinceMs, reason, outages: this.outages };
  }

  /** Resolves once connected (at startup), or rejects after `timeoutMs`. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    const started = Date.now();
    if (this.cluster) await waitForReady(this.cluster, timeoutMs);
    this.watchMasters();
    await Promise.all([...this.probes.values()].map((probe) => waitForReady(probe.client, Math.max(1, timeoutMs - (Date.now() - started)))));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await Promise.all([...this.probes.values()].map((probe) => closeClient(probe.client)));
    if (this.cluster) await closeClient(this.cluster);
  }

  private addProbe(key: string, label: string, client: Redis): void {
    const probe: Probe = { label, client, lastError: null, stalled: null, pinging: false };
    this.probes.set(key, probe);
    client.on('ready', () => {
      probe.lastError = null;
      probe.stalled = null;
      this.assess();
    });
    client.on('error', (error: Error) => {
      probe.lastError = error.message;
    });
    client.on('close', () => this.assess());
  }

  /** A connection to each master of the cluster's slot map, none to a node that no longer is one. */
  private watchMasters(): void {
    if (!this.cluster || this.stopped || this.cluster.status !== 'ready') return;
    const masters = new Map(masterNodes(this.cluster).map((node) => [nodeName(node), node]));
    for (const [name, probe] of this.probes) {
      if (masters.has(name)) continue;
      this.probes.delete(name);
      probe.client.disconnect();
    }
    for (const [name, node] of masters) {
      if (this.probes.has(name)) continue;
      const client = new Redis(nodeOptions(this.cluster, node, { ...FAIL_FAST, retryStrategy: (attempt) => Math.min(50 * attempt, 1000) }));
      this.addProbe(name, `master ${name}: `, client);
    }
    this.assess();
  }

  private pingAll(): void {
    // The map comes back with the 'refresh' event, which watches its masters.
    if (this.cluster?.status === 'ready') this.cluster.refreshSlotsCache();
    this.watchMasters();
    for (const probe of this.probes.values()) this.ping(probe);
  }

  private ping(probe: Probe): void {
    if (probe.pinging || probe.client.status !== 'ready') return;
    probe.pinging = true;
    // False when the connection dropped meanwhile: its 'close' has said so already.
    const answered = probe.client.ping().then(
      () => true,
      () => false,
    );
    let settled = false;
    void answered.then((ok) => {
      settled = true;
      probe.pinging = false;
      if (ok) probe.stalled = null;
      this.assess();
    });
    withinDeadline(answered, this.stallAfterMs, () => new Error(`no answer to PING within ${this.stallAfterMs} ms`)).catch((error: Error) => {
      if (settled || probe.client.status !== 'ready') return;
      probe.stalled = error.message;
      this.assess();
    });
  }

  /** The state of the worst connection: down before stalled before up. */
  private verdict(): { state: RedisState; reason: string | null } {
    if (this.cluster && this.cluster.status !== 'ready') return { state: 'down', reason: 'cluster client not connected' };
    if (this.probes.size === 0) return { state: 'down', reason: 'not connected yet' };
    let stalled: string | null = null;
    for (const probe of this.probes.values()) {
      if (probe.client.status !== 'ready') return { state: 'down', reason: probe.label + (probe.lastError ?? 'connection closed') };
      if (probe.stalled !== null && stalled === null) stalled = probe.label + probe.stalled;
    }
    return stalled === null ? { state: 'up', reason: null } : { state: 'stalled', reason: stalled };
  }

  private assess(): void {
    const { state, reason } = this.verdict();
    this.become(state, reason);
  }

  private become(state: RedisState, reason: string | null): void {
    if (this.stopped || state === this.state) return;
    const now = Date.now();
    this.state = state;
    this.sinceMs = now;
    this.reason = reason;
    if (state === 'up') {
      if (this.outageStartedMs !== null) {
        this.log.info(`Redis at ${this.target} is answering again, after ${((now - this.outageStartedMs) / 1000).toFixed(1)} s`);
      }
      this.outageStartedMs = null;
      this.wasUp = true;
    } else if (this.wasUp && this.outageStartedMs === null) {
      this.outageStartedMs = now;
      this.outages += 1;
      this.log.warn(
        `Redis at ${this.target} ${state === 'down' ? 'unreachable' : 'stalled'}: ${reason}; ` +
          'going on without it until it is back (limits, usage records and token changes: docs/operations.md)',
      );
    }
  }
}
