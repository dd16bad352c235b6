import { Cluster, Redis, ReplyError } from 'ioredis';
import { withinDeadline } from './deadline.js';
import { closeClient, FAIL_FAST, keySlot, masterNodes, nodeName, nodeOptions, redisClient, waitForReady } from './redis/client.js';
import { redactUrl } from './startup.js';

/**
 * `stalled`: connected, but a PING or a write has gone unanswered past the threshold (a frozen or
 * overloaded server; `CLIENT PAUSE WRITE`). `refusing`: connected and answering, but refusing
 * writes (OOM, MISCONF, READONLY, NOREPLICAS…): what the usage records and the limits write.
 */
export type RedisState = 'up' | 'down' | 'stalled' | 'refusing';

export interface RedisHealthSnapshot {
  state: RedisState;
  /** When it entered this state (ms since the epoch). */
  sinceMs: number;
  /** Why it is not up: the connection's last error, the PING or write left unanswered, or Redis's refusal; null while up. */
  reason: string | null;
  /** Times it went from up to down, stalled or refusing since this process started. */
  outages: number;
}

/** Where changes are told: one warning when an outage starts, one info when it ends (a pino logger fits). */
export interface HealthLog {
  warn(message: string): void;
  info(message: string): void;
}

export interface RedisHealthOptions {
  log: HealthLog;
  /** A PING and a probe write are sent this often (one of each at a time: none while one is unanswered). */
  pingEveryMs?: number;
  /** A PING or a probe write unanswered this long makes the state `stalled`. */
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
  /** The key its probe writes (on a cluster, one in a slot of its master); null until one is found. */
  writeKey: string | null;
  /** Redis's refusal of its last probe write (`OOM command not allowed…`), while it still refuses. */
  refusing: string | null;
  /** Why its last probe write went unanswered, while it still is. */
  writeStalled: string | null;
  writing: boolean;
}

/** The probe write's key (`health:{<n>}`: on a cluster, the first `n` whose slot the master serves) and how long it lives. */
const WRITE_KEY = (n: number): string => `health:{${n}}`;
const WRITE_TTL_MS = 10_000;
/** Cluster slots a master may serve none of (its slots moved meanwhile): the search stops here. */
const MAX_KEY_SEARCH = 100_000;

/** An error Redis answered (not a lost connection or a timeout). */
const isReplyError = (error: unknown): error is Error => error instanceof ReplyError;

/** Redis's reply error, its first sentence: `OOM command not allowed when used memory > 'maxmemory'`. */
const refusalOf = (error: Error): string => {
  const end = error.message.indexOf('. ');
  return (end < 0 ? error.message : error.message.slice(0, end)).replace(/\.$/, '');
};

/**
 * The health of this process's Redis, in one place. The adapters' connections (limiter, usage
 * queue, change feed) reach the same server with the same reconnect policy, and each copes with
 * an outage on its own without logging; this watches a connection of its own: its events say
 * when the server is unreachable (it reconnects like theirs) and a periodic PING when it is
 * connected but not answering, which no connection event reveals. An outage is logged once when
 * it starts, whatever it goes through (down, stalled, refusing, reconnect attempts), and once
 * when it ends.
 *
 * A Redis that answers PING may still refuse every write: `maxmemory` reached under
 * `noeviction` (OOM), a failed RDB save with stop-writes-on-bgsave-error (MISCONF, which refuses
 * PING too), REDIS_URL at a replica (READONLY), `min-replicas-to-write` unmet (NOREPLICAS), or
 * hold writes unanswered (`CLIENT PAUSE WRITE`). Then the limits fall back and the usage records
 * wait in memory as in an outage, and a PING saw none of it (/readyz said ready, nothing was
 * logged). So each round also writes a tiny key that expires (`SET health:{<n>} <ms> PX 10000`):
 * refused, the state is `refusing` with Redis's reason; unanswered past `stallAfterMs`,
 * `stalled`.
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
  /** Set once up: not reaching Redis at start is the startup wait's to report, not an outage. */
  private wasUp = false;
  private outageStartedMs: number | null = null;
  /** What the outage was when it started: its end is told in the same terms. */
  private outageKind: RedisState = 'down';
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
    const probe: Probe = {
      label,
      client,
      lastError: null,
      stalled: null,
      pinging: false,
      writeKey: this.cluster ? null : WRITE_KEY(0),
      refusing: null,
      writeStalled: null,
      writing: false,
    };
    this.probes.set(key, probe);
    client.on('ready', () => {
      probe.lastError = null;
      probe.stalled = null;
      probe.writeStalled = null;
      // A reconnected server may refuse writes (a replica now, a cluster node back before its
      // cluster is ok: CLUSTERDOWN): its state is told once the write is answered, not `up` before.
      if (probe.writing || !this.write(probe)) this.assess();
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
    for (const probe of this.probes.values()) {
      this.ping(probe);
      this.write(probe);
    }
  }

  private ping(probe: Probe): void {
    if (probe.pinging || probe.client.status !== 'ready') return;
    probe.pinging = true;
    // False when the connection dropped meanwhile: its 'close' has said so already. A reply
    // error is an answer: MISCONF refuses PING, and the probe write tells that refusal.
    const answered = probe.client.ping().then(
      () => true,
      (error: unknown) => isReplyError(error),
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

  /**
   * The probe write: refused (a reply error), Redis's reason is kept until one is taken; not
   * answered within `stallAfterMs`, it is stalled. A connection lost meanwhile is the 'close''s.
   */
  private write(probe: Probe): boolean {
    if (probe.writing || probe.client.status !== 'ready' || this.stopped) return false;
    const key = probe.writeKey ?? this.writeKeyOf(probe);
    if (key === null) return false;
    probe.writing = true;
    const answered = probe.client.set(key, Date.now(), 'PX', WRITE_TTL_MS).then(
      () => {
        probe.refusing = null;
        return true;
      },
      (error: unknown) => {
        if (!isReplyError(error)) return false;
        // The slot moved to another master (resharding): another key next time, no verdict.
        if (/^(MOVED|ASK) /.test(error.message)) probe.writeKey = null;
        else probe.refusing = refusalOf(error);
        return true;
      },
    );
    let settled = false;
    void answered.then((ok) => {
      settled = true;
      probe.writing = false;
      if (ok) probe.writeStalled = null;
      this.assess();
    });
    withinDeadline(answered, this.stallAfterMs, () => new Error(`no answer to a write within ${this.stallAfterMs} ms`)).catch((error: Error) => {
      if (settled || probe.client.status !== 'ready') return;
      probe.writeStalled = error.message;
      this.assess();
    });
    return true;
  }

  /** On a cluster, a key of a slot the probe's master serves (null when it serves none). */
  private writeKeyOf(probe: Probe): string | null {
    if (!this.cluster) return WRITE_KEY(0);
    const name = nodeName({ host: String(probe.client.options.host), port: Number(probe.client.options.port) });
    for (let n = 0; n < MAX_KEY_SEARCH; n++) {
      const key = WRITE_KEY(n);
      if (this.cluster.slots[keySlot(key)]?.[0] === name) {
        probe.writeKey = key;
        return key;
      }
    }
    return null;
  }

  /** The state of the worst connection: down before stalled before refusing before up. */
  private verdict(): { state: RedisState; reason: string | null } {
    if (this.cluster && this.cluster.status !== 'ready') return { state: 'down', reason: 'cluster client not connected' };
    if (this.probes.size === 0) return { state: 'down', reason: 'not connected yet' };
    let stalled: string | null = null;
    let refusing: string | null = null;
    for (const probe of this.probes.values()) {
      if (probe.client.status !== 'ready') return { state: 'down', reason: probe.label + (probe.lastError ?? 'connection closed') };
      const unanswered = probe.stalled ?? (probe.writeStalled === null ? null : `${probe.writeStalled} (PING answered)`);
      if (unanswered !== null && stalled === null) stalled = probe.label + unanswered;
      if (probe.refusing !== null && refusing === null) refusing = probe.label + probe.refusing;
    }
    if (stalled !== null) return { state: 'stalled', reason: stalled };
    return refusing === null ? { state: 'up', reason: null } : { state: 'refusing', reason: refusing };
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
        const after = `after ${((now - this.outageStartedMs) / 1000).toFixed(1)} s`;
        this.log.info(`Redis at ${this.target} ${this.outageKind === 'refusing' ? 'accepts writes again' : 'is answering again'}, ${after}`);
      }
      this.outageStartedMs = null;
      this.wasUp = true;
    } else if ((this.wasUp || state !== 'down') && this.outageStartedMs === null) {
      // Reached but refusing (or stalled) from the start is an outage too: REDIS_URL at a replica.
      this.outageStartedMs = now;
      this.outageKind = state;
      this.outages += 1;
      this.log.warn(
        state === 'refusing'
          ? `Redis at ${this.target} refuses writes: ${reason}; going on without writing to it until it takes writes again ` +
              '(limits, usage records: docs/operations.md)'
          : `Redis at ${this.target} ${state === 'down' ? 'unreachable' : 'stalled'}: ${reason}; ` +
              'going on without it until it is back (limits, usage records and token changes: docs/operations.md)',
      );
    }
  }
}
