import { expect } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import type { EventStore } from '../../src/infra/eventstore/port.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';
import type { Runtime } from '../../src/runtime.js';
import { eventually } from './eventually.js';
import { usageEventId } from './oneCallUsage.js';

/** The calls an account's usage stream records, in order, whatever events hold them (one call each, or batches). */
export const recordedCalls = async (store: Pick<EventStore, 'readStream'>, accountId: string): Promise<UsageRecord[]> =>
  (await store.readStream(usageStream(accountId))).flatMap(usageRecordsOf);

/**
 * Appends the calls to their accounts' usage logs, one event a call (as the ingester once
 * wrote them), and waits until the projector has projected them.
 */
export async function recordUsage(runtime: Pick<Runtime, 'store' | 'projector'>, records: readonly UsageRecord[]): Promise<void> {
  const accounts = [...new Set(records.map((r) => r.accountId))];
  for (const accountId of accounts) {
    const own = records.filter((r) => r.accountId === accountId);
    await runtime.store.append(
      usageStream(accountId),
      own.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } })),
      'any',
    );
  }
  const head = await runtime.store.headPosition();
  if (head) await runtime.projector?.waitFor(head);
}

/**
 * Waits until every one of `served` (request ids) is in the account's usage log, then checks that
 * none is missing and none recorded twice; gives the recorded ids.
 */
export async function expectEachRecordedOnce(
  store: Pick<EventStore, 'readStream'>,
  accountId: string,
  served: readonly string[],
  options: { timeoutMs?: number; describe?: () => string } = {},
): Promise<string[]> {
  const ids = await eventually(
    async () => (await recordedCalls(store, accountId)).map((c) => c.requestId),
    (seen) => {
      const kept = new Set(seen);
      return served.every((id) => kept.has(id));
    },
    options.timeoutMs ?? 20_000,
  );
  const kept = new Set(ids);
  expect(
    served.filter((id) => !kept.has(id)),
    `every served call is recorded${options.describe ? `; ${options.describe()}` : ''}`,
  ).toEqual([]);
  expect(ids.length, 'no call recorded twice').toBe(kept.size);
  return ids;
}
