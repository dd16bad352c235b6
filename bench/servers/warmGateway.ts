/**
 * The service as `src/main.ts` starts it (ROLE=all from the environment: runtime, HTTP server,
 * projector, ingester; or the gateway role with BENCH_ROLE=gateway, see benchConfig.ts), plus one thing for bench/gateway-rss.ts: on SIGUSR2 it looks up every
 * token of TOKENS_FILE through its own token cache (`runtime.gateway.tokens.get(hash)`, what a
 * first call with that token does) and prints `warmed <n> tokens…`; on the next SIGUSR2 it prints
 * its live heap (after a full collection when started with --expose-gc). Calling
 * 100,000 tokens through HTTP would take minutes on 2 shared cores; this fills the same cache.
 *
 *   TOKENS_FILE=… DATA_DIR=… PORT=… node dist/bench-build/bench/servers/warmGateway.js  (compiled by bench/lib/services.ts)
 */
import { readFileSync } from 'node:fs';
import { hashToken } from '../../src/domain/tokenFormat.js';
import { openRuntime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { benchConfig } from './benchConfig.js';

const LOOKUPS_IN_FLIGHT = 64;

async function main(): Promise<void> {
  const config = benchConfig(process.env);
  const runtime = await openRuntime(config);
  const app = await buildServer(runtime, { logger: true });
  await runtime.projector?.start();
  runtime.ingester?.start();
  await app.listen({ port: config.port, host: config.host });

  const tokens = runtime.gateway?.tokens;
  if (!tokens) throw new Error('this role serves no chain calls');
  // Started with --expose-gc: heap figures after a full collection, i.e. live memory only.
  const collect = (globalThis as { gc?: () => void }).gc ?? (() => {});
  const heapMb = (): number => {
    collect();
    return Math.round((process.memoryUsage().heapUsed / 1048576) * 10) / 10;
  };
  let warmed = false;
  process.on('SIGUSR2', () => {
    if (warmed) {
      const live = heapMb();
      const m = process.memoryUsage();
      const mb = (n: number): number => Math.round(n / 1048576);
      process.stdout.write(`live heap ${live} MB, after gc: rss ${mb(m.rss)} MB, heap total ${mb(m.heapTotal)} MB, external ${mb(m.external)} MB\n`);
      return;
    }
    warmed = true;
    void (async () => {
      const hashes = readFileSync(process.env.TOKENS_FILE ?? '', 'utf8').split('\n').filter((t) => t !== '').map(hashToken);
      const heapBefore = heapMb();
      const started = performance.now();
      let next = 0;
      let found = 0;
      const worker = async (): Promise<void> => {
        while (next < hashes.length) {
          const hash = hashes[next++] as string;
          if (await tokens.get(hash)) found++;
        }
      };
      await Promise.all(Array.from({ length: LOOKUPS_IN_FLIGHT }, worker));
      process.stdout.write(`warmed ${found} tokens in ${Math.round(performance.now() - started)} ms, cache size ${tokens.size}, live heap before ${heapBefore} MB\n`);
    })();
  });
  process.on('SIGTERM', () => {
    void app
      .close()
      .then(() => runtime.close())
      .then(() => process.exit(0));
  });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
