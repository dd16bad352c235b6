/**
 * The service as `src/main.ts` starts it (ROLE=all from the environment: runtime, HTTP server,
 * projector, ingester; or the gateway role with BENCH_ROLE=gateway, see benchConfig.ts), plus one thing for bench/gateway-rss.ts: on SIGUSR2 it looks up every
 * token of TOKENS_FILE through its own token cache (`runtime.gateway.tokens.get(hash)`, what a
 * first call with that token does) and prints `warmed <n> tokens…`; on the next SIGUSR2 it prints
 * its live memory (V8 heap and array buffers, after a full collection when started with --expose-gc). Calling
 * 100,000 tokens through HTTP would take minutes on 2 shared cores; this fills the same cache.
 *
 *   TOKENS_FILE=… DATA_DIR=… PORT=… node dist/bench-build/bench/servers/warmGateway.js  (compiled by bench/lib/services.ts)
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
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
  // Started with --expose-gc: figures after a full collection, i.e. live memory only: the V8
  // heap and the array buffers outside it (the token cache keeps its records in some).
  const collect = (globalThis as { gc?: () => void }).gc ?? (() => {});
  const liveMb = (): number => {
    collect();
    const m = process.memoryUsage();
    return Math.round(((m.heapUsed + m.arrayBuffers) / 1048576) * 10) / 10;
  };
  let warmed = false;
  process.on('SIGUSR2', () => {
    if (warmed) {
      const live = liveMb();
      const m = process.memoryUsage();
      const mb = (n: number): number => Math.round(n / 1048576);
      process.stdout.write(`live memory ${live} MB, after gc: rss ${mb(m.rss)} MB, heap total ${mb(m.heapTotal)} MB, external ${mb(m.external)} MB\n`);
      return;
    }
    warmed = true;
    void (async () => {
      // Measured before the tokens are read, and the tokens read a line at a time: the bench's
      // own list of 100,000 tokens (~20 MB of strings) is not a gateway's, and would both count in
      // the live memory and raise the heap's high-water mark that RSS keeps.
      const liveBefore = liveMb();
      const started = performance.now();
      const lines = createInterface({ input: createReadStream(process.env.TOKENS_FILE ?? '') })[Symbol.asyncIterator]();
      let found = 0;
      const worker = async (): Promise<void> => {
        for (let line = await lines.next(); !line.done; line = await lines.next()) {
          if (line.value !== '' && (await tokens.get(hashToken(line.value)))) found++;
        }
      };
      await Promise.all(Array.from({ length: LOOKUPS_IN_FLIGHT }, worker));
      process.stdout.write(
        `warmed ${found} tokens in ${Math.round(performance.now() - started)} ms, cache size ${tokens.size}, live memory before ${liveBefore} MB\n`,
      );
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
