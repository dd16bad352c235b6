import { describe, expect, it } from 'vitest';
import { DependencyUnreachableError, redactUrl, untilReachable } from '../../src/infra/startup.js';

/** A clock that only moves when the waiter sleeps: no real waiting in these tests. */
function fakeTime() {
  let t = 0;
  return {
    now: () => t,
    sleep: async (ms: number) => {
      t += ms;
    },
  };
}

describe('untilReachable: waiting at start for a production service', () => {
  it('retries until the service answers, saying each time what it waits for', async () => {
    const time = fakeTime();
    const logs: string[] = [];
    let attempts = 0;
    const value = await untilReachable(
      'Redis',
      'redis://127.0.0.1:6390',
      async () => {
        attempts += 1;
        if (attempts < 3) throw new Error('connect ECONNREFUSED 127.0.0.1:6390');
        return 'connected';
      },
      { deadlineMs: 60_000, retryMs: 1000, log: (m) => logs.push(m), ...time },
    );
    expect(value).toBe('connected');
    expect(attempts).toBe(3);
    expect(logs).toHaveLength(2);
    expect(logs[0]).toMatch(/^Waiting for Redis at redis:\/\/127\.0\.0\.1:6390.*ECONNREFUSED.*giving up after 60 s/);
  });

  it('gives up after the deadline with the service, its address, the deadline and the last reason', async () => {
    const time = fakeTime();
    const failing = untilReachable(
      'MongoDB',
      'mongodb://user:pw@db:27017/gw',
      async () => {
        throw new Error('Server selection timed out');
      },
      { deadlineMs: 5000, retryMs: 1000, log: () => {}, ...time },
    );
    await expect(failing).rejects.toBeInstanceOf(DependencyUnreachableError);
    await expect(failing).rejects.toThrow(
      /^MongoDB at mongodb:\/\/user:\*\*\*@db:27017\/gw was not reachable within 5 s \(STARTUP_TIMEOUT_SECONDS\): Server selection timed out$/,
    );
    // It stops a retry short of the deadline (here after 4 s), and still names the deadline the operator set.
    expect(time.now()).toBeLessThanOrEqual(5000);
  });

  it("names the service's own error, not the timeout of a last attempt a late retry left a few ms for (a loaded machine)", async () => {
    // The 200 ms sleep lasts 5,995 ms, as a starved event loop's timer may: the second attempt gets the 5 ms left.
    let t = 0;
    let attempts = 0;
    const failing = untilReachable(
      'Redis',
      'redis+cluster://127.0.0.1:7001,127.0.0.1:7002',
      (timeoutMs) => {
        attempts += 1;
        if (attempts === 1) return Promise.reject(new Error('127.0.0.1:7002 (connect ECONNREFUSED 127.0.0.1:7002)'));
        return new Promise<never>((_, reject) => setTimeout(() => reject(new Error('late')), timeoutMs + 50));
      },
      {
        deadlineMs: 6000,
        attemptTimeoutMs: 800,
        retryMs: 200,
        log: () => {},
        now: () => t,
        sleep: async () => {
          t += 5995;
        },
      },
    );
    // Before: "…within 6 s (STARTUP_TIMEOUT_SECONDS): no answer within 5 ms".
    await expect(failing).rejects.toThrow(/not reachable within 6 s \(STARTUP_TIMEOUT_SECONDS\): 127\.0\.0\.1:7002 \(connect ECONNREFUSED/);
    expect(attempts).toBe(2);
  });

  it('ends an attempt that hangs at its timeout, and counts it as a failure', async () => {
    const logs: string[] = [];
    let attempts = 0;
    const value = await untilReachable(
      'EventStoreDB',
      'esdb://127.0.0.1:2113',
      (timeoutMs) => {
        attempts += 1;
        expect(timeoutMs).toBeLessThanOrEqual(20);
        return attempts === 1 ? new Promise<string>(() => {}) : Promise.resolve('up');
      },
      { deadlineMs: 2000, attemptTimeoutMs: 20, retryMs: 1, log: (m) => logs.push(m) },
    );
    expect(value).toBe('up');
    expect(logs[0]).toMatch(/no answer within 20 ms/);
  });

  it('never logs a password', () => {
    expect(redactUrl('redis://:s3cret@10.0.0.5:6379/0')).toBe('redis://:***@10.0.0.5:6379/0');
    expect(redactUrl('not a url')).toBe('(unparsable URL)');
  });
});
