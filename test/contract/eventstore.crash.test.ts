import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { newEvent, SubscriptionReader } from './eventstore.contract.js';

const WRITER = fileURLToPath(new URL('./fixtures/eventstoreCrashWriter.ts', import.meta.url));
const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const WRITERS = 6;
const ROUNDS = 3;

const dir = mkdtempSync(join(tmpdir(), 'gw-eventstore-crash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Starts the writer, lets it append for `ms` after it is ready, kills it with SIGKILL; returns the last acknowledged revision per stream. */
async function writeThenKill(ms: number): Promise<Map<string, number>> {
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER, dir, String(WRITERS)], {
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const acknowledged = new Map<string, number>();
  let stderr = '';
  let partial = '';
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  child.stdout.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? ''; // a line cut by the kill is not an acknowledgement
    for (const line of lines) {
      if (line === 'ready') markReady();
      const [word, stream, revision] = line.split(' ');
      if (word === 'ack' && stream && revision) acknowledged.set(stream, Math.max(acknowledged.get(stream) ?? -1, Number(revision)));
    }
  });
  // 'close', not 'exit': every line the writer got out before dying is read by then.
  const closed = new Promise<NodeJS.Signals | null>((resolve) => child.on('close', (_code, signal) => resolve(signal)));
  await Promise.race([ready, closed.then(() => Promise.reject(new Error(`writer died before it was ready:\n${stderr}`)))]);
  await new Promise((resolve) => setTimeout(resolve, ms));
  child.kill('SIGKILL');
  expect(await closed, stderr).toBe('SIGKILL');
  return acknowledged;
}

/** Every stream whole and contiguous, every batch whole, the global log gap-free and matching the streams. */
async function verify(store: LevelEventStore, acknowledged: Map<string, number>): Promise<number> {
  let streamTotal = 0;
  for (let writer = 0; writer < WRITERS; writer++) {
    const stream = `crash-${writer}`;
    const events = await store.readStream(stream);
    streamTotal += events.length;
    expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));
    expect(events.length - 1).toBeGreaterThanOrEqual(acknowledged.get(stream) ?? -1);
    expectWholeBatches(stream, events);
  }

  const subscription = store.subscribeToAll();
  const { events: log, caughtUpAt } = await new SubscriptionReader(subscription).untilCaughtUp(20_000);
  await subscription.close();
  expect(log.map((e) => Number(e.position))).toEqual(log.map((_, i) => i + 1));
  expect(log).toHaveLength(streamTotal);
  expect(caughtUpAt).toBe(await store.headPosition());
  for (const event of log) expect(event.data['stream']).toBe(event.streamId);
  return streamTotal;
}

function expectWholeBatches(stream: string, events: StoredEvent[]): void {
  for (let i = 0; i < events.length; ) {
    const first = events[i]!.data;
    const size = first['size'] as number;
    const batch = events.slice(i, i + size);
    expect(
      batch.map((e) => [e.data['batch'], e.data['index']]),
      `${stream}@${i}: a batch of ${size} events written in part`,
    ).toEqual(Array.from({ length: size }, (_, index) => [first['batch'], index]));
    i += size;
  }
}

describe('LevelEventStore under kill -9', () => {
  it(`keeps every acknowledged append whole, and nothing torn, over ${ROUNDS} crashes`, async () => {
    let previousTotal = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const acknowledged = await writeThenKill(300 + round * 200);
      expect(acknowledged.size, `round ${round}: the writer acknowledged nothing`).toBeGreaterThan(0);

      const store = await LevelEventStore.open(dir);
      try {
        const total = await verify(store, acknowledged);
        expect(total).toBeGreaterThan(previousTotal);
        previousTotal = total;
        // The store goes on where it stopped.
        const stream = 'crash-0';
        const head = (await store.readStream(stream)).length - 1;
        const next = await store.append(stream, [{ ...newEvent('Resumed'), data: { stream, batch: `resume-${round}`, index: 0, size: 1 } }], head);
        expect(next.nextExpectedRevision).toBe(head + 1);
        previousTotal += 1;
      } finally {
        await store.close();
      }
    }
  }, 60_000);
});
