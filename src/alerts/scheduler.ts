import type { AlertEvaluator } from './evaluator.js';
import type { Notifier } from './notifier.js';

/**
 * Runs the evaluator every `evaluateEveryMs` (a pass is skipped while the previous one runs)
 * and polls the notifier's queue every `pollEveryMs`; both only where the projector runs.
 */
export function startAlertScheduler(
  evaluator: AlertEvaluator,
  notifier: Notifier,
  options: { evaluateEveryMs: number; pollEveryMs?: number; onError?: (e: unknown) => void },
): { stop(): Promise<void> } {
  let evaluating = false;
  let polling = false;
  const evaluate = async () => {
    if (evaluating) return;
    evaluating = true;
    try {
      await evaluator.runOnce();
      await notifier.dispatch(); // what just fired goes out now, not at the next poll
    } catch (e) {
      options.onError?.(e);
    } finally {
      evaluating = false;
    }
  };
  const poll = async () => {
    if (polling) return;
    polling = true;
    try {
      await notifier.dispatch();
    } catch (e) {
      options.onError?.(e);
    } finally {
      polling = false;
    }
  };
  const timers = [
    ...(options.evaluateEveryMs > 0 ? [setInterval(() => void evaluate(), options.evaluateEveryMs)] : []),
    setInterval(() => void poll(), options.pollEveryMs ?? 1000),
  ];
  for (const t of timers) t.unref();
  return {
    async stop() {
      for (const t of timers) clearInterval(t);
      await notifier.stop();
    },
  };
}
