import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, describe, expect, it } from 'vitest';
import { processSemiSpaceMb, startStorageWorker } from '../../src/infra/storagethread/index.js';

/** What the storage thread puts back once its own, larger young generation is made (src/infra/storagethread/index.ts). */
describe('the process’s --max-semi-space-size', () => {
  it('is read from the command line, NODE_OPTIONS first so that the command line wins', () => {
    expect(processSemiSpaceMb(['--max-semi-space-size=8'], '')).toBe(8);
    expect(processSemiSpaceMb(['--max-semi-space-size=8'], '--max-semi-space-size=64')).toBe(8);
    expect(processSemiSpaceMb([], '--enable-source-maps  --max_semi_space_size=16')).toBe(16);
  });

  it('is the last one given, in either spelling V8 accepts', () => {
    expect(processSemiSpaceMb(['--max-semi-space-size=8', '--max_semi_space_size=32'], '')).toBe(32);
  });

  it('is 0, V8’s “not set”, when none is given or none is a number', () => {
    expect(processSemiSpaceMb([], '')).toBe(0);
    expect(processSemiSpaceMb(['--max-old-space-size=512', '--min-semi-space-size=4', '--max-semi-space-size=big'], '')).toBe(0);
  });
});

describe('the storage thread’s young generation', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-semispace-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /**
   * A thread that keeps 200,000 young objects alive while it allocates millions more, so V8
   * grows its new space as far as it may, and reports the largest size it reached (two
   * semi-spaces), in MB.
   */
  const grower = join(dir, 'grow.cjs');
  writeFileSync(
    grower,
    `const v8 = require('node:v8');
const { parentPort } = require('node:worker_threads');
const kept = new Array(200000);
let largest = 0;
for (let i = 0; i < 3000000; i++) {
  kept[i % kept.length] = { i, s: 'x' + i };
  if (i % 10000 === 0) largest = Math.max(largest, v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size);
}
parentPort.postMessage(largest / 1048576);`,
  );
  const newSpaceMb = (worker: Worker): Promise<number> =>
    new Promise((resolve, reject) => {
      worker.once('message', resolve).once('error', reject);
    });
  const plain = (): Promise<number> => newSpaceMb(new Worker(grower));

  it('grows to 32 MB a semi-space, and a thread started after it gets the process’s own again', async () => {
    const before = await plain();
    expect(await newSpaceMb(startStorageWorker(pathToFileURL(grower), {}))).toBe(64);
    expect(await plain()).toBe(before);
    expect(before).toBeLessThan(64);
  }, 30_000);
});
