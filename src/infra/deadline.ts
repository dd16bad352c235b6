/**
 * `promise`, or a rejection with `timedOut()` once `ms` have passed without it settling. The
 * deadline is judged only after the event loop has read its sockets (setImmediate runs after
 * the poll phase): after a stall of this process (a long collection, a busy turn, a paused VM)
 * the next turn runs its timers before the I/O that waited, and an answer that arrived in time
 * would be called late. (The upstream pool keeps the same rule with one timer for all its
 * calls: InFlightCalls in src/gateway/upstream.ts.) A promise given up on may still reject
 * later: that is handled here, never an unhandled rejection.
 */
export function withinDeadline<T>(promise: Promise<T>, ms: number, timedOut: () => Error): Promise<T> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(
      () => {
        setImmediate(() => {
          if (settled) return;
          settled = true;
          reject(timedOut());
        });
      },
      Math.max(ms, 0),
    );
    promise.then(
      (value) => {
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
