/**
 * The service as the benchmarks run it when they change something about it:
 * - BENCH_ROLE=gateway: the production gateway role for the gateway benchmark's Redis mode (see
 *   benchConfig.ts): the usage records stay in the Redis stream, where a projector elsewhere
 *   would ingest them;
 * - otherwise ROLE=all, as src/main.ts runs it (its projector and usage ingester started), for
 *   bench/compare-gateway.ts's embedded mode with features taken out.
 *
 *   [BENCH_ROLE=gateway REDIS_URL=…] DATA_DIR=… PORT=… node dist/bench-build/bench/servers/benchGateway.js  (compiled by bench/lib/services.ts)
 *
 * BENCH_WITHOUT=<feature,…> takes features out (withoutFeatures.ts), for bench/compare-gateway.ts's `WITHOUT=`.
 */
import { openRuntime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { benchConfig } from './benchConfig.js';
import { parseFeatures, withoutFeatures } from './withoutFeatures.js';

async function main(): Promise<void> {
  const features = parseFeatures(process.env.BENCH_WITHOUT);
  const runtime = await openRuntime(benchConfig(process.env));
  withoutFeatures(runtime, features);
  const app = await buildServer(runtime, { logger: true });
  await runtime.projector?.start();
  runtime.ingester?.start();
  await app.listen({ port: runtime.config.port, host: runtime.config.host });
  process.on('SIGTERM', () => {
    // Closing flushes buffered records (to Redis, or into the store); bounded, the benchmark waits 5 s at most.
    const done = (): never => process.exit(0);
    setTimeout(done, 2000).unref();
    void app
      .close()
      .then(() => runtime.close())
      .then(done, done);
  });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
