/**
 * Preloaded into a service process by a test (`--import`): on SIGUSR2, every worker thread the
 * service started runs `process.exit(1)`, which ends that thread alone, as a crash over there
 * would. Node's own threads (the module loader's, which tsx uses) are left alone.
 * It reaches the threads through the process's own inspector (NodeWorker domain), so the
 * service's code has no hook for it. Workers inherit the preload; only the main thread acts.
 * JavaScript, not TypeScript: a worker thread runs its inherited `--import`s before tsx's
 * loader is registered there.
 */
import { Session } from 'node:inspector';
import { isMainThread } from 'node:worker_threads';

if (isMainThread) {
  const session = new Session();
  session.connect();
  /** Inspector session ids of the service's worker threads. */
  const workers = new Set();
  session.on('NodeWorker.attachedToWorker', (message) => {
    const { sessionId, workerInfo } = message.params;
    if (!workerInfo.url.startsWith('node:')) workers.add(sessionId);
  });
  session.post('NodeWorker.enable', { waitForDebuggerOnStart: false });
  process.on('SIGUSR2', () => {
    for (const sessionId of workers) {
      const evaluate = JSON.stringify({ id: 1, method: 'Runtime.evaluate', params: { expression: 'process.exit(1)' } });
      session.post('NodeWorker.sendMessageToWorker', { sessionId, message: evaluate });
    }
    console.error(`stopWorkersOnSignal: told ${workers.size} worker thread(s) to exit`);
  });
}
