import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

/** A child process hammering one token through the Redis limiter as a gateway composes it (test/contract/fixtures/limits-hammer.ts). */
const HAMMER = fileURLToPath(new URL('../contract/fixtures/limits-hammer.ts', import.meta.url));

export interface HammerResult {
  calls: number;
  callsPerSecond: Record<string, number>;
  grantedPerSecond: Record<string, number>;
}

interface Hammer {
  /** Resolves once the child is connected to Redis and waits for its start instant. */
  ready: Promise<void>;
  start(atMs: number): void;
  result: Promise<HammerResult>;
}

function startHammer(args: string[]): Hammer {
  const child = spawn(process.execPath, ['--import', 'tsx', HAMMER, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let markReady = (): void => {};
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    if (out.startsWith('ready\n')) markReady();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const result = new Promise<HammerResult>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code === 0) resolve(JSON.parse(out.slice('ready\n'.length)) as HammerResult);
      else reject(new Error(`hammer exited ${code}: ${err}`));
    });
  });
  return {
    ready: Promise.race([ready, result.then(() => Promise.reject(new Error(`hammer exited before it was ready: ${err}`)))]),
    start: (atMs) => child.stdin.end(`${atMs}\n`),
    result,
  };
}

/**
 * Two processes hammer one token at once, each through its own limiter on `redisUrl`: within
 * any second, together they are never granted more than the rate, and in some second the rate
 * was really contended (both called, and were granted it to the brim).
 */
export async function expectRateHeldAcrossTwoProcesses(redisUrl: string): Promise<void> {
  const rps = 20;
  const tokenId = `tok${randomUUID()}`;
  const bucket = `account:${randomUUID()}`;
  const args = [redisUrl, tokenId, bucket, String(rps), '2000'];
  const hammers = [startHammer(args), startHammer(args)];
  // Both start on the same instant, once both have loaded and connected, however slowly.
  await Promise.all(hammers.map((h) => h.ready));
  const startAtMs = Date.now() + 200;
  for (const h of hammers) h.start(startAtMs);
  const results = await Promise.all(hammers.map((h) => h.result));

  const perSecond = new Map<string, number>();
  for (const result of results) {
    expect(result.calls).toBeGreaterThan(rps);
    for (const [second, granted] of Object.entries(result.grantedPerSecond)) {
      perSecond.set(second, (perSecond.get(second) ?? 0) + granted);
    }
  }
  for (const granted of perSecond.values()) expect(granted).toBeLessThanOrEqual(rps);
  // The limit was really contended: in some second both processes called and, together,
  // were granted the rate to the brim. Which of them got the grants is a race (leases).
  const contended = [...perSecond].filter(([second, granted]) => granted === rps && results.every((r) => (r.callsPerSecond[second] ?? 0) > 0));
  expect(contended.length).toBeGreaterThan(0);
}
