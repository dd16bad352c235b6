import type { Redis } from 'ioredis';
import { withinDeadline } from './deadline.js';
import { FAIL_FAST, closeClient, connectRedis, waitForReady } from './limits/redisConnection.js';
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

/**
 * The health of this process's Redis, in one place. The adapters' connections (limiter, usage
 * queue, change feed) reach the same server with the same reconnect policy, and each copes with
 * an outage on its own without logging; this watches a connection of its own: its events say
 * when the server is unreachable (it reconnects like theirs) and a periodic PING when it is
 * connected but not answering, which no connection event reveals. An outage is logged once when
 * it starts, whatever it goes through (down, stalled, reconnect attempts), and once when it ends.
 */
export class RedisHealth {
  private readonly probe: Redis;
  private readonly target: string;
  private readonly log: HealthLog;
  private readonly stallAfterMs: number;
  private readonly timer: NodeJS.Timeout;
  private state: RedisState = 'down';
  private sinceMs = Date.now();
  private reason: string | null = 'not connected yet';
  private lastError: string | null = null;
  /** Set once connected: not reaching Redis at start is the startup wait's to report, not an outage. */
  private wasUp = false;
  private outageStartedMs: number | null = null;
  private pinging = false;
  private stopped = false;
  private outages = 0;

  constructor(redisUrl: string, options: RedisHealthOptions) {
    this.target = redactUrl(redisUrl);
    this.log = options.log;
    this.stallAfterMs = options.stallAfterMs ?? 2000;
    this.probe = connectRedis(redisUrl, FAIL_FAST);
    this.probe.on('ready', () => {
      this.lastError = null;
      this.become('up', null);
    });
    this.probe.on('error', (error: Error) => {
      this.lastError = error.message;
    });
    this.probe.on('close', () => this.become('down', this.lastError ?? 'connection closed'));
    this.timer = setInterval(() => this.ping(), options.pingEveryMs ?? 1000);
    this.timer.unref();
  }

  snapshot(): RedisHealthSnapshot {
    // While down, the latest reconnect attempt's error says more than the one at the cut.
    const reason = this.state === 'down' ? (this.lastError ?? this.reason) : this.reason;
    return { state: this.state, sinceMs: this.sinceMs, reason, outages: this.outages };
  }

  /** Resolves once connected (at startup), or rejects after `timeoutMs`. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.probe, timeoutMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await closeClient(this.probe);
  }

  private ping(): void {
    if (this.pinging || this.probe.status !== 'ready') return;
    this.pinging = true;
    // False when the connection dropped meanwhile: its 'close' has said so already.
    const answered = this.probe.ping().then(() => true, () => false);
    let settled = false;
    void answered.then((ok) => {
      settled = true;
      this.pinging = false;
      if (ok && this.probe.status === 'ready') this.become('up', null);
    });
    withinDeadline(answered, this.stallAfterMs, () => new Error(`no answer to PING within ${this.stallAfterMs} ms`)).catch((error: Error) => {
      if (!settled && this.probe.status === 'ready') this.become('stalled', error.message);
    });
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
