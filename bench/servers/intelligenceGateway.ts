import { startGateway } from '../../test/support/gatewayApp.js';
import { TestGatekeeper } from '../../test/support/gatewayTestGatekeeper.js';

/**
 * The gateway's chain routes alone, for bench/upstream-intelligence.ts: a process of its own, so
 * its CPU is its own. Chains from BENCH_CHAINS (JSON), pool options from BENCH_POOL (JSON). Prints
 * `{"url","token"}` when listening; on SIGTERM, the usage records' `cache` tally, then exits.
 */
const gatekeeper = new TestGatekeeper();
const gateway = await startGateway({ gatekeeper, chains: JSON.parse(process.env.BENCH_CHAINS ?? '[]'), pool: JSON.parse(process.env.BENCH_POOL ?? '{}') });
const tally: Record<string, number> = {};
setInterval(() => {
  for (const u of gateway.usage.splice(0)) tally[u.cache ?? 'none'] = (tally[u.cache ?? 'none'] ?? 0) + 1;
}, 200).unref();
process.stdout.write(`${JSON.stringify({ url: gateway.url, token: gatekeeper.token })}\n`);
process.on('SIGTERM', () => {
  for (const u of gateway.usage.splice(0)) tally[u.cache ?? 'none'] = (tally[u.cache ?? 'none'] ?? 0) + 1;
  process.stdout.write(`${JSON.stringify({ tally })}\n`);
  void gateway.close().finally(() => process.exit(0));
});
