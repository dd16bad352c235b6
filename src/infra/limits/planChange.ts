import { decodeEvent } from '../../domain/eventCodec.js';
import type { PlanCatalog } from '../../domain/plans.js';
import { withinDeadline } from '../deadline.js';
import type { StoredEvent } from '../eventstore/port.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import { quotaBucket } from './port.js';
import { monthKey } from './redis.js';
import { monthId, monthlyTtlSeconds } from './window.js';

/**
 * Moves units into or out of an account's month once per plan change: KEYS[1] the account's
 * month, KEYS[2] the plan change's marker (same hash tag, one slot). ARGV: units (negative: out),
 * TTL (s) of both. Nothing when the marker is there already (a replay, a second projector). The
 * count never goes below 0. Returns the count before and after.
 */
const MOVE_LUA = `
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
  return false
end
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
local after = math.max(before + tonumber(ARGV[1]), 0)
redis.call('SET', KEYS[1], after, 'EX', tonumber(ARGV[2]))
return {before, after}
`;

/**
 * The marker of one plan change in the month it moved: `pc:{account:<id>}:<YYYYMM>:<eventId>`,
 * in the account month's slot, kept as long as that month's count.
 */
export const planChangeMarkerKey = (accountId: string, nowMs: number, eventId: string): string =>
  `pc:{${quotaBucket.account(accountId)}}:${monthId(nowMs)}:${eventId}`;

interface MoveCommands {
  limiterMovePlanChange(accountMonth: string, marker: string, units: number, ttlSeconds: number): Promise<[number, number] | null>;
}

export type PlanChangeMove =
  | { kind: 'moved'; accountId: string; units: number; before: number; after: number }
  | { kind: 'skipped'; why: 'not a plan change' | 'custom limits unchanged' | 'an earlier month' | 'moved already' };

export interface PlanChangeCountsOptions {
  plans: PlanCatalog;
  /** The account's tokens with their own monthly limit (Queries.tokenIdsWithOwnMonthlyLimit), as the account view has them. */
  ownLimitTokens(accountId: string): Promise<string[]>;
  now?: () => number;
  log?: (line: string) => void;
  /** Each Redis command's deadline. */
  commandTimeoutMs?: number;
}

/** A failed move is tried again after 1 s, then twice as long each time up to this. */
const RETRY_MAX_MS = 30_000;

/**
 * Redis's account bucket at a plan change that turns custom limits off or on (docs/decisions.md,
 * "A token's month is counted whatever its limit"). On a plan with custom limits a token with
 * its own monthly limit counts on its own bucket only; on one without (Free) its calls count on
 * the account's, as every call of the month does in the account view. So, on the projector once
 * the `AccountPlanChanged` is committed and before the gateways hear of it: to a plan without
 * custom limits, those tokens' months (`mq:{token:<id>}:<YYYYMM>`, every call of the token
 * whatever its bucket) are added to the account's; back to one with custom limits, they are taken
 * out again. Once per plan change: a marker per event, set in the same script as the move. Only
 * a change of the current month moves (an earlier month's bucket decides nothing any more, and a
 * replay from the start of the log must not move old changes into this month). Nothing on the
 * gateways' hot path changes.
 */
export class PlanChangeCounts {
  readonly types: ReadonlySet<string> = new Set(['AccountPlanChanged']);
  private readonly client: RedisClient;
  private readonly now: () => number;
  private readonly log: (line: string) => void;
  private readonly commandTimeoutMs: number;
  private readonly retries = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    redisUrl: string,
    private readonly options: PlanChangeCountsOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.log = options.log ?? ((line) => console.warn(line));
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2000;
    this.client = redisClient(redisUrl, FAIL_FAST);
    this.client.defineCommand('limiterMovePlanChange', { numberOfKeys: 2, lua: MOVE_LUA });
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  /** The runner's follower: each plan change of a committed batch, in order; a failed one is tried again later. */
  readonly committed = async (events: readonly StoredEvent[]): Promise<void> => {
    for (const event of events) await this.moveOrRetry(event, 0);
  };

  /** Moves the account's count for one plan change, or says why not. */
  async move(stored: StoredEvent): Promise<PlanChangeMove> {
    const event = decodeEvent(stored);
    if (event?.type !== 'AccountPlanChanged') return { kind: 'skipped', why: 'not a plan change' };
    const { accountId, from, to, at } = event.data;
    const customBefore = this.options.plans[from].custom_limits;
    const customAfter = this.options.plans[to].custom_limits;
    if (customBefore === customAfter) return { kind: 'skipped', why: 'custom limits unchanged' };
    const nowMs = this.now();
    if (monthId(Date.parse(at)) !== monthId(nowMs)) return { kind: 'skipped', why: 'an earlier month' };
    const tokenIds = await this.options.ownLimitTokens(accountId);
    const months = await this.withinDeadline(Promise.all(tokenIds.map((id) => this.client.get(monthKey(quotaBucket.token(id), nowMs)))));
    const units = months.reduce((sum, used) => sum + (used === null ? 0 : Number(used)), 0);
    const signed = customAfter ? -units : units;
    // Run even for 0 units: the marker keeps a later replay, when the months have grown, from moving them.
    const commands = this.client as unknown as MoveCommands;
    const ttl = monthlyTtlSeconds(nowMs);
    const reply = await this.withinDeadline(
      commands.limiterMovePlanChange(monthKey(quotaBucket.account(accountId), nowMs), planChangeMarkerKey(accountId, nowMs, stored.id), signed, ttl),
    );
    if (reply === null) return { kind: 'skipped', why: 'moved already' };
    return { kind: 'moved', accountId, units: signed, before: Number(reply[0]), after: Number(reply[1]) };
  }

  private async moveOrRetry(event: StoredEvent, attempt: number): Promise<void> {
    try {
      await this.move(event);
      if (attempt > 0) this.log(`limits: plan change ${event.id} moved the account's monthly count after ${attempt + 1} attempts`);
    } catch (error) {
      if (attempt === 0) {
        const why = error instanceof Error ? error.message : String(error);
        this.log(`limits: plan change ${event.id} did not move the account's monthly count (${why}); trying again`);
      }
      this.retryLater(event, attempt + 1);
    }
  }

  private retryLater(event: StoredEvent, attempt: number): void {
    if (this.closed) return;
    const timer = setTimeout(
      () => {
        this.retries.delete(timer);
        void this.moveOrRetry(event, attempt);
      },
      Math.min(1000 * 2 ** (attempt - 1), RETRY_MAX_MS),
    );
    timer.unref();
    this.retries.add(timer);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.retries) clearTimeout(timer);
    this.retries.clear();
    await closeClient(this.client);
  }

  private withinDeadline<T>(reply: Promise<T>): Promise<T> {
    return withinDeadline(reply, this.commandTimeoutMs, () => new Error(`no reply from Redis within ${this.commandTimeoutMs} ms`));
  }
}
