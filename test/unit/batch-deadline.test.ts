import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BatchDeadline } from '../../src/projections/runner.js';

/** A promise and the function that resolves it. */
function later<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('a live batch deadline', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('waits for the next item as it is while no clock runs', async () => {
    const deadline = new BatchDeadline();
    const next = later<string>();
    const waited = deadline.cutShort(next.promise);
    await vi.advanceTimersByTimeAsync(50);
    next.resolve('event');
    await expect(waited).resolves.toBe('event');
  });

  it('gives the item that comes before the deadline', async () => {
    const deadline = new BatchDeadline();
    deadline.arm(5);
    const next = later<string>();
    const waited = deadline.cutShort(next.promise);
    await vi.advanceTimersByTimeAsync(2);
    next.resolve('event');
    await expect(waited).resolves.toBe('event');
  });

  it('cuts the wait short once the deadline passes, and the item still comes on the next wait', async () => {
    const deadline = new BatchDeadline();
    deadline.arm(5);
    const next = later<string>();
    const waited = deadline.cutShort(next.promise);
    await vi.advanceTimersByTimeAsync(5);
    await expect(waited).resolves.toBeNull();
    deadline.clear();
    const again = deadline.cutShort(next.promise);
    next.resolve('event');
    await expect(again).resolves.toBe('event');
  });

  it('remembers a deadline that passed while nobody waited', async () => {
    const deadline = new BatchDeadline();
    deadline.arm(5);
    await vi.advanceTimersByTimeAsync(10);
    const never = new Promise<string>(() => undefined);
    await expect(Promise.race([deadline.cutShort(never), Promise.resolve('still waiting')])).resolves.toBeNull();
  });

  it('keeps its first deadline when armed again, and starts none once cleared', async () => {
    const deadline = new BatchDeadline();
    deadline.arm(5);
    await vi.advanceTimersByTimeAsync(3);
    deadline.arm(5); // a later event of the same batch
    const waited = deadline.cutShort(new Promise<string>(() => undefined));
    await vi.advanceTimersByTimeAsync(2);
    await expect(waited).resolves.toBeNull();

    deadline.clear();
    const next = later<string>();
    const unbounded = deadline.cutShort(next.promise);
    await vi.advanceTimersByTimeAsync(50);
    next.resolve('event');
    await expect(unbounded).resolves.toBe('event');
  });

  it('moves to a sooner deadline, never to a later one', async () => {
    const deadline = new BatchDeadline();
    const never = new Promise<string>(() => undefined);
    const stillWaiting = (): Promise<string | null> => Promise.race([deadline.cutShort(never), Promise.resolve('still waiting')]);
    deadline.arm(250); // usage events may gather for a while
    await vi.advanceTimersByTimeAsync(10);
    deadline.arm(5); // an event somebody waits for
    await vi.advanceTimersByTimeAsync(4);
    await expect(stillWaiting()).resolves.toBe('still waiting');
    await vi.advanceTimersByTimeAsync(1);
    await expect(stillWaiting()).resolves.toBeNull();

    deadline.clear();
    deadline.arm(5);
    deadline.arm(250);
    await vi.advanceTimersByTimeAsync(5);
    await expect(stillWaiting()).resolves.toBeNull();
  });

  it('passes on a failure of the wait', async () => {
    const deadline = new BatchDeadline();
    deadline.arm(5);
    await expect(deadline.cutShort(Promise.reject(new Error('store closed')))).rejects.toThrow('store closed');
  });
});
