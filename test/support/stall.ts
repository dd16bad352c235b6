/**
 * A stall of this process (a long collection, a paused VM, a busy turn): the thread is kept busy
 * and nothing else of the process runs meanwhile. Called from a setImmediate callback, the next
 * turn of the event loop starts with its timers, as after any stall, and only then reads the
 * sockets: what a timer-based deadline must not get wrong.
 */
export function blockFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy on purpose
  }
}
