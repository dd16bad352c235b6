import { createServer } from 'node:net';
import { startExpiryScheduler } from './commands/expiryScheduler.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import { ChainConfigError } from './gateway/chains.js';
import { type Devnet, startDevnet } from './infra/devnet.js';
import { EventStoreError } from './infra/eventstore/errors.js';
import { DependencyUnreachableError } from './infra/startup.js';
import { openRuntime } from './runtime.js';
import { buildServer } from './server.js';

const DEVNET_PORT = 8545;

const portIsFree = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });

/** The `local` chain gets an in-process EVM devnet unless an upstream is configured for it. */
async function maybeStartDevnet(config: Config): Promise<Devnet | null> {
  if (config.role !== 'all' || !config.localDevnet || config.env.UPSTREAM_LOCAL) return null;
  const devnet = await startDevnet({ port: (await portIsFree(DEVNET_PORT)) ? DEVNET_PORT : 0 });
  // ganache speaks WebSocket (eth_subscribe) on its HTTP port.
  config.env = { ...config.env, UPSTREAM_LOCAL: devnet.url, UPSTREAM_LOCAL_WS: devnet.url.replace(/^http/, 'ws') };
  return devnet;
}

/**
 * Whether this process keeps anything under DATA_DIR (LevelDB stores, the usage journal): only
 * ROLE=all does, for what has no service of its own. Another role naming it would send an
 * operator looking for data that is not there.
 */
function usesDataDir(config: Config): boolean {
  if (config.role !== 'all') return false;
  const ownEventStore = !config.eventstoreUrl && !config.databaseUrl;
  const ownReadModels = !config.mongodbUrl && !config.databaseUrl;
  return ownEventStore || ownReadModels || !config.redisUrl;
}

async function main(): Promise<void> {
  const config = loadConfig(process.env, process.argv[2]);
  const devnet = await maybeStartDevnet(config);
  const runtime = await openRuntime(config);
  const app = await buildServer(runtime, { logger: true });
  await runtime.projector?.start();
  runtime.ingester?.start();
  const expiry =
    config.role === 'all' || config.role === 'projector'
      ? startExpiryScheduler(runtime.queries, runtime.commands, { onError: (e) => app.log.error({ err: e }, 'expiry scheduler') })
      : null;
  // Before listening: a SIGTERM right after "ready" must drain, not kill (no handler means the default: exit at once).
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'shutting down: no new connections, finishing calls in flight, flushing usage');
    expiry?.stop();
    // Keep-alive clients would hold the server open: while it closes, drop each connection as
    // soon as it is idle (after the answer to its call in flight).
    const dropIdle = setInterval(() => app.server.closeIdleConnections(), 50);
    await app.close();
    clearInterval(dropIdle);
    app.log.info('HTTP closed; draining usage and closing stores');
    await runtime.close();
    await devnet?.close();
    app.log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  await app.listen({ port: config.port, host: config.host });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const base = `http://${config.host === '0.0.0.0' ? 'localhost' : config.host}:${port}`;
  console.log(`\nGateway (${config.role}) ready at ${base}`);
  if (runtime.gateway)
    console.log(
      `  chains: ${runtime.gateway.chains
        .list()
        .map((c) => c.id)
        .join(', ')}${devnet ? ` (local devnet at ${devnet.url})` : ''}`,
    );
  if (config.role === 'all' || config.role === 'api') console.log(`  dashboard and API: ${base}/${usesDataDir(config) ? `   data: ${config.dataDir}` : ''}\n`);
}

main().catch((e: unknown) => {
  if (e instanceof ConfigError || e instanceof ChainConfigError) {
    console.error(`Configuration error: ${e.message}`);
    process.exit(2);
  }
  // A data directory another process holds, or whose log is damaged: the store's own one-line reason.
  if (e instanceof EventStoreError && (e.code === 'store_locked' || e.code === 'store_damaged')) {
    console.error(`Could not start: ${e.message}`);
    process.exit(1);
  }
  if (e instanceof DependencyUnreachableError) {
    console.error(`Could not start: ${e.message}`);
    process.exit(1);
  }
  console.error('Could not start:', e);
  process.exit(1);
});
