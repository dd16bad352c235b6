import { accessSync, constants, mkdirSync, statSync } from 'node:fs';
import { startExpiryScheduler } from './commands/expiryScheduler.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import { ChainConfigError } from './gateway/chains.js';
import { type Devnet, startDevnetPreferring } from './infra/devnet.js';
import { EventStoreError } from './infra/eventstore/errors.js';
import { DependencyUnreachableError } from './infra/startup.js';
import { openRuntime } from './runtime.js';
import { buildServer } from './server.js';

const DEVNET_PORT = 8545;

/** The `local` chain gets an in-process EVM devnet unless an upstream is configured for it. */
async function maybeStartDevnet(config: Config): Promise<Devnet | null> {
  if (config.role !== 'all' || !config.localDevnet || config.env.UPSTREAM_LOCAL) return null;
  const devnet = await startDevnetPreferring(DEVNET_PORT);
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

/** A start-up failure the operator fixes outside the program (a port, a directory): one line, exit 1. */
class StartupError extends Error {
  override name = 'StartupError';
}

/** A Node system error (`EADDRINUSE`, `EACCES`, …) as one line: its message already names the call and the address or path. */
function systemError(e: unknown): (Error & { code: string }) | null {
  const code: unknown = e instanceof Error ? (e as Error & { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^E[A-Z0-9]+$/.test(code) ? (e as Error & { code: string }) : null;
}

/**
 * DATA_DIR is checked before anything opens in it: the stores would otherwise fail on a storage
 * thread, as a stack trace that names neither the setting nor the directory the operator gave.
 */
function checkDataDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (e) {
    const reason = systemError(e)?.code === 'EEXIST' || systemError(e)?.code === 'ENOTDIR' ? 'it is a file, not a directory' : (e as Error).message;
    throw new StartupError(`DATA_DIR (${dir}) cannot be used: ${reason}`);
  }
  if (!statSync(dir).isDirectory()) throw new StartupError(`DATA_DIR (${dir}) cannot be used: it is a file, not a directory`);
  try {
    accessSync(dir, constants.W_OK);
  } catch (e) {
    throw new StartupError(`DATA_DIR (${dir}) cannot be used: this process may not write there (${(e as Error).message})`);
  }
}

/** What to do on SIGTERM or SIGINT: until the service is up, stop at once (nothing is served yet); then drain. */
let onStopSignal = (signal: NodeJS.Signals): void => {
  console.error(`Stopped by ${signal} while starting: nothing was served.`);
  process.exit(0);
};
process.on('SIGTERM', () => onStopSignal('SIGTERM'));
process.on('SIGINT', () => onStopSignal('SIGINT'));

async function main(): Promise<void> {
  const config = loadConfig(process.env, process.argv[2]);
  if (usesDataDir(config)) checkDataDir(config.dataDir);
  const devnet = await maybeStartDevnet(config);
  const runtime = await openRuntime(config);
  const app = await buildServer(runtime, { logger: true });
  await runtime.projector?.start();
  runtime.ingester?.start();
  const expiry =
    config.role === 'all' || config.role === 'projector'
      ? startExpiryScheduler(runtime.queries, runtime.commands, { onError: (e) => app.log.error({ err: e }, 'expiry scheduler') })
      : null;
  // Before listening: a SIGTERM right after "ready" must drain, not stop at once as it does while starting.
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
  onStopSignal = (signal) => void stop(signal);
  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (e) {
    const failure = systemError(e);
    if (failure?.code === 'EADDRINUSE') throw new StartupError(`PORT ${config.port} on HOST ${config.host} is in use by another process`);
    if (failure?.code === 'EACCES')
      throw new StartupError(`PORT ${config.port} on HOST ${config.host} needs privileges this process lacks: ${failure.message}`);
    if (failure) throw new StartupError(`cannot listen on HOST ${config.host}, PORT ${config.port}: ${failure.message}`);
    throw e;
  }
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
  if (e instanceof DependencyUnreachableError || e instanceof StartupError) {
    console.error(`Could not start: ${e.message}`);
    process.exit(1);
  }
  console.error('Could not start:', e);
  process.exit(1);
});
