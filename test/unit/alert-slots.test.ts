import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ABANDONED_SLOT_MS, AlertCommands, type AlertInput } from '../../src/commands/alertCommands.js';
import { DomainError } from '../../src/domain/errors.js';
import { encodeEvent, type VersionedEvent } from '../../src/domain/eventCodec.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';

/**
 * Alert slots on a real event store, past what the decider sees: the repair of slots a crash
 * left behind (between the slot and the alert's stream, or between a delete and its release),
 * and the count of the alerts made before slots existed, checked on their own streams.
 */

const accountId = 'acc_0000000000000001';
const start = Date.parse('2026-11-27T12:00:00.000Z');
let clock = start;
let dir: string;
let store: LevelEventStore;
let listed: string[];
let alerts: AlertCommands;

const rule: AlertInput = { name: 'errors', rule: { type: 'error_rate', threshold: 5 }, channels: [{ type: 'email', to: 'ops@example.com' }] };
const at = () => new Date(clock).toISOString();
const append = (streamId: string, event: VersionedEvent) => store.append(streamId, [encodeEvent(event)], 'any');
const onAccount = (type: string, data: Record<string, unknown>) => append(`account-${accountId}`, { type, version: 1, data: { accountId, ...data, at: at() } });
const alertCreated = (alertId: string, owner = accountId) =>
  append(`alert-${alertId}`, {
    type: 'AlertCreated',
    version: 1,
    data: {
      alertId,
      accountId: owner,
      name: alertId,
      rule: { type: 'error_rate', condition: null, threshold: 5, windowMinutes: 5, tokenId: null, minRequests: 10, baselineHours: null },
      channels: [{ type: 'email', id: 'chn_0000000000000001', active: true, to: 'ops@example.com' }],
      enabled: true,
      at: at(),
    },
  });
const refusal = async (): Promise<string | null> =>
  alerts.create(accountId, rule).then(
    () => null,
    (e: unknown) => (e instanceof DomainError ? e.code : Promise.reject(e)),
  );
const slotEvents = async (type: string) => (await store.readStream(`account-${accountId}`)).filter((e) => e.type === type).map((e) => e.data);

beforeEach(async () => {
  clock = start;
  dir = mkdtempSync(join(tmpdir(), 'gw-alert-slots-'));
  store = await LevelEventStore.open(dir);
  listed = [];
  alerts = new AlertCommands(
    store,
    DEFAULT_PLANS,
    { planOf: async () => 'free', tokenOf: async () => null, alertIdsOf: async () => listed },
    () => new Date(clock),
  );
  await onAccount('AccountSignedUp', { email: 'o@example.com', passwordHash: 'h', plan: 'free' });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('alert slots left behind by a crash', () => {
  it('frees a slot whose alert was never written, once it is old enough to be abandoned', async () => {
    await onAccount('AlertSlotsAdopted', { alertIds: [] });
    for (let i = 0; i < 5; i++) await onAccount('AlertSlotTaken', { alertId: `alr_abandoned000000${i}` });
    clock = start + 60_000;
    expect(await refusal()).toBe('alert_limit_reached'); // may still be a creation under way
    clock = start + ABANDONED_SLOT_MS + 1;
    expect(await refusal()).toBeNull();
    expect(await slotEvents('AlertSlotReleased')).toHaveLength(5);
    expect((await slotEvents('AlertSlotReleased')).every((d) => d['reason'] === 'abandoned')).toBe(true);
  });

  it('frees the slot of an alert deleted before its slot was released', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await alerts.create(accountId, rule)).alertId);
    expect(await refusal()).toBe('alert_limit_reached');
    await append(`alert-${ids[1]}`, { type: 'AlertDeleted', version: 1, data: { alertId: ids[1], accountId, at: at() } });
    expect(await refusal()).toBeNull();
    expect(await slotEvents('AlertSlotReleased')).toEqual([{ accountId, alertId: ids[1], reason: 'deleted', at: at() }]);
    expect(await refusal()).toBe('alert_limit_reached');
  });
});

describe('alerts made before slots existed', () => {
  it('counts those live on their own streams and owned by the account, whatever the read model lists', async () => {
    const own = ['alr_legacy0000000001', 'alr_legacy0000000002', 'alr_legacy0000000003', 'alr_legacy0000000004'];
    for (const id of own) await alertCreated(id);
    await alertCreated('alr_legacydeleted001');
    await append('alert-alr_legacydeleted001', { type: 'AlertDeleted', version: 1, data: { alertId: 'alr_legacydeleted001', accountId, at: at() } });
    await alertCreated('alr_legacyforeign001', 'acc_0000000000000002');
    listed = [...own, 'alr_legacydeleted001', 'alr_legacyforeign001', 'alr_legacynowhere001'];

    const fifth = await alerts.create(accountId, rule);
    expect(await slotEvents('AlertSlotsAdopted')).toEqual([{ accountId, alertIds: own, at: at() }]);
    expect(await refusal()).toBe('alert_limit_reached');
    await alerts.delete(accountId, own[0] as string);
    listed = ['alr_someoneelse00001'];
    await alerts.create(accountId, rule);
    expect(await slotEvents('AlertSlotsAdopted')).toHaveLength(1);
    await alerts.delete(accountId, fifth.alertId);
    expect((await slotEvents('AlertSlotReleased')).map((d) => d['alertId'])).toEqual([own[0], fifth.alertId]);
  });
});
