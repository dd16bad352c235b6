import type { Queries } from '../projections/queries.js';
import type { AccountCommands } from './accountCommands.js';

/**
 * Appends ApiTokenExpired for tokens whose date has passed. The gateway refuses such a token at
 * once anyway; this makes the expiry a fact in the token's history and frees its plan slot.
 */
export function startExpiryScheduler(
  queries: Queries,
  commands: AccountCommands,
  options: { intervalMs?: number; onError?: (e: unknown) => void } = {},
): { stop(): void; runOnce(): Promise<number> } {
  let running = false;
  const runOnce = async (): Promise<number> => {
    if (running) return 0;
    running = true;
    let expired = 0;
    try {
      for (const token of await queries.tokensPastExpiry()) {
        if (await commands.expireApiToken(token.id)) expired++;
      }
    } finally {
      running = false;
    }
    return expired;
  };
  const timer = setInterval(() => void runOnce().catch((e) => options.onError?.(e)), options.intervalMs ?? 5000);
  timer.unref();
  return { stop: () => clearInterval(timer), runOnce };
}
