import { apiTokenDecider } from '../../domain/apiToken.js';
import { decodeEvent } from '../../domain/eventCodec.js';
import type { ApiTokenEvent } from '../../domain/events.js';
import type { PlanCatalog } from '../../domain/plans.js';
import { withinDeadline } from '../deadline.js';
import type { EventStore, StoredEvent } from '../eventstore/port.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import { quotaBucket } from './port.js';
import { inAccountKey, monthKey } from './redis.js';
import { monthId, monthlyTtlSeconds } from './window.js';

/**
 * Moves units into or out of an account's month once per change: KEYS[1] the account's month,
 * KEYS[2] the change's marker (same hash tag, one slot). ARGV: units (negative: out),
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
 * Sets the part of a token's month its account's month holds (redis.ts, `inAccountKey`), once per
 * change: KEYS[1] the token's month, KEYS[2] that part, KEYS[3] the change's marker (one hash
 * tag). ARGV: 1 when the token counts apart (none of its month in the account's), 0 when not (all
 * of it); TTL (s). Returns by how much the account's month is to move; seen again, the same.
 */
const SHARE_LUA = `
local done = redis.call('GET', KEYS[3])
if done then
  return tonumber(done)
end
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local held = tonumber(redis.call('GET', KEYS[2]) or '0')
local wanted = used
if ARGV[1] == '1' then
  wanted = 0
end
if wanted ~= held then
  redis.call('SET', KEYS[2], wanted, 'EX', tonumber(ARGV[2]))
end
redis.call('SET', KEYS[3], wanted - held, 'EX', tonumber(ARGV[2]))
return wanted - held
`;

/**
 * The marker of one change in the month it moved: `pc:{account:<id>}:<YYYYMM>:<eventId>`, in the
 * account month's slot, kept as long as that month's count.
 */
export const planChangeMarkerKey = (accountId: string, nowMs: number, eventId: string): string =>
  `pc:{${quotaBucket.account(accountId)}}:${monthId(nowMs)}:${eventId}`;

/** The marker of one change's setting of a token's part: `pc:{token:<id>}:<YYYYMM>:<eventId>`, in the token month's slot. */
const shareMarkerKey = (tokenId: string, nowMs: number, eventId: string): string => `pc:{${quotaBucket.token(tokenId)}}:${monthId(nowMs)}:${eventId}`;

interface MoveCommands {
  limiterMovePlanChange(accountMonth: string, marker: string, units: number, ttlSeconds: number): Promise<[number, number] | null>;
  limiterSetShare(tokenMonth: string, inAccount: string, marker: string, apart: number, ttlSeconds: number): Promise<number>;
}

export type PlanChangeMove =
  | { kind: 'moved'; accountId: string; units: number; before: number; after: number }
  | { kind: 'skipped'; why: 'not followed' | 'custom limits unchanged' | 'an earlier month' | 'own limit unchanged' | 'a token not known' | 'moved already' };

/** A token's account, and whether the token counts apart from it now (its own monthly limit, on a plan with custom limits). */
export interface TokenCounting {
  accountId: string;
  apart: boolean;
}

export interface PlanChangeCountsOptions {
  plans: PlanCatalog;
  /** The account's tokens with their own monthly limit (Queries.tokenIdsWithOwnMonthlyLimit), as the account view has them. */
  ownLimitTokens(accountId: string): Promise<string[]>;
  /** A token's counting now, as the account view has it; null for a token not known. */
  tokenCounting(tokenId: string): Promise<TokenCounting | null>;
  /** Whether the token had its own monthly limit just before `change` (its stream up to it). */
  ownLimitBefore(change: StoredEvent): Promise<boolean>;
  now?: () => number;
  log?: (line: string) => void;
  /** Each Redis command's deadline. */
  commandTimeoutMs?: number;
}

/** Whether a token had its own monthly limit just before `change`, an event of its stream: that stream folded up to it. */
export async function ownMonthlyLimitBefore(store: EventStore, change: StoredEvent): Promise<boolean> {
  let state = apiTokenDecider.initialState();
  for (const stored of await store.readStream(change.streamId, { maxCount: change.revision })) {
    const event = decodeEvent(stored);
    // A token's stream holds only its own events.
    if (event !== null) state = apiTokenDecider.evolve(state, event as ApiTokenEvent);
  }
  return state.status !== 'none' && state.monthlyLimit !== null;
}

/** How the log names a change. */
const changeName = (event: StoredEvent): string => (event.type === 'AccountPlanChanged' ? 'plan change' : 'limit change');

/** A failed move is tried again after 1 s, then twice as long each time up to this. */
const RETRY_MAX_MS = 30_000;

/**
 * Redis's account bucket at a change of which of its tokens count apart (docs/decisions.md, "A
 * token's month is counted whatever its limit"): a plan change that turns custom limits off or on,
 * a token's own monthly limit set or removed. On a plan with custom limits a token with its own
 * monthly limit counts on its own bucket only, and the account view leaves its whole month out of
 * the account's; otherwise its calls count on the account's, as every call of the month does in
 * the view. So, on the projector once the `AccountPlanChanged` or `ApiTokenLimitsChanged` is
 * committed and before the gateways hear of it, the account's month gets the whole month
 * (`mq:{token:<id>}:<YYYYMM>`, every call of the token whatever its bucket) of each such token that
 * no longer counts apart, and loses what it holds of the month of each that now does: the part
 * counted on the account's bucket (`inAccountKey`, counted with it) or moved in. A token given its
 * own limit mid-month so takes its earlier calls out with it, and a move to Free adds them once.
 * Once per change: each token's part is set by a script that keeps what it moved under the event's
 * marker, the account's month by one that sets the event's marker with the move. Only a change of
 * the current month moves (an earlier month's bucket decides nothing any more, and a replay from
 * the start of the log must not move old changes into this month).
 */
export class PlanChangeCounts {
  readonly types: ReadonlySet<string> = new Set(['AccountPlanChanged', 'ApiTokenLimitsChanged']);
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
    this.client.defineCommand('limiterSetShare', { numberOfKeys: 3, lua: SHARE_LUA });
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  /** The runner's follower: each change of a committed batch, in order; a failed one is tried again later. */
  readonly committed = async (events: readonly StoredEvent[]): Promise<void> => {
    for (const event of events) await this.moveOrRetry(event, 0);
  };

  /** Moves the account's count for one change, or says why not. */
  async move(stored: StoredEvent): Promise<PlanChangeMove> {
    const event = decodeEvent(stored);
    const nowMs = this.now();
    if (event?.type === 'AccountPlanChanged') {
      const { accountId, from, to, at } = event.data;
      const customAfter = this.options.plans[to].custom_limits;
      if (this.options.plans[from].custom_limits === customAfter) return { kind: 'skipped', why: 'custom limits unchanged' };
      if (monthId(Date.parse(at)) !== monthId(nowMs)) return { kind: 'skipped', why: 'an earlier month' };
      const tokenIds = await this.options.ownLimitTokens(accountId);
      return this.moveParts(stored.id, accountId, tokenIds, customAfter, nowMs);
    }
    if (event?.type === 'ApiTokenLimitsChanged') {
      if (monthId(Date.parse(event.data.at)) !== monthId(nowMs)) return { kind: 'skipped', why: 'an earlier month' };
      // Only a monthly limit set or removed changes where the token counts. Checked on the event,
      // not on the parts: in the month a gateway of an older version counted, a token's part is
      // missing, and a rate limit edit would have added its earlier calls to the account again.
      if ((event.data.monthlyLimit !== null) === (await this.options.ownLimitBefore(stored))) return { kind: 'skipped', why: 'own limit unchanged' };
      const counting = await this.options.tokenCounting(event.data.tokenId);
      if (counting === null) return { kind: 'skipped', why: 'a token not known' };
      return this.moveParts(stored.id, counting.accountId, [event.data.tokenId], counting.apart, nowMs);
    }
    return { kind: 'skipped', why: 'not followed' };
  }

  /** Sets the tokens' parts in the account's month (all apart, or none), then moves the account's month by the sum. */
  private async moveParts(eventId: string, accountId: string, tokenIds: readonly string[], apart: boolean, nowMs: number): Promise<PlanChangeMove> {
    const commands = this.client as unknown as MoveCommands;
    const ttl = monthlyTtlSeconds(nowMs);
    const parts = await this.withinDeadline(
      Promise.all(
        tokenIds.map((id) =>
          commands.limiterSetShare(monthKey(quotaBucket.token(id), nowMs), inAccountKey(id, nowMs), shareMarkerKey(id, nowMs, eventId), apart ? 1 : 0, ttl),
        ),
      ),
    );
    const units = parts.reduce((sum, part) => sum + Number(part), 0);
    // Run even for 0 units: the marker keeps a later replay from moving anything.
    const reply = await this.withinDeadline(
      commands.limiterMovePlanChange(monthKey(quotaBucket.account(accountId), nowMs), planChangeMarkerKey(accountId, nowMs, eventId), units, ttl),
    );
    if (reply === null) return { kind: 'skipped', why: 'moved already' };
    return { kind: 'moved', accountId, units, before: Number(reply[0]), after: Number(reply[1]) };
  }

  private async moveOrRetry(event: StoredEvent, attempt: number): Promise<void> {
    try {
      await this.move(event);
      if (attempt > 0) this.log(`limits: ${changeName(event)} ${event.id} moved the account's monthly count after ${attempt + 1} attempts`);
    } catch (error) {
      if (attempt === 0) {
        const why = error instanceof Error ? error.message : String(error);
        this.log(`limits: ${changeName(event)} ${event.id} did not move the account's monthly count (${why}); trying again`);
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
