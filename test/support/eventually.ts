/**
 * Probes until `ok` holds or `timeoutMs` passes, then returns the last value: the test asserts
 * on it, so a timeout fails with what was seen, not with "timed out".
 */
export async function eventually<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Polls until `probe` holds, or throws after `timeoutMs`. */
export async function until(probe: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
