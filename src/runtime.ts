import { hostname } from 'node:os';
import { AccountCommands } from './commands/accountCommands.js';
import type { ApiDeps } from './commands/api/deps.js';
import { Sessions } from './commands/api/sessions.js';
import type { Config } from './config.js';
import { openChangeFeed } from './infra/changefeed/index.js';
import type { ChangeFeed } from './infra/changefeed/port.js';
import { openEventStore } from './infra/eventstore/index.js';
import type { EventStore, Position } from './infra/eventstore/port.js';
import { openLimiter } from './infra/limits/index.js';
import type { Limiter } from './infra/limits/port.js';
import { openReadModels } from './infra/readmodels/index.js';
import type { ReadModelStore } from './infra/readmodels/port.js';
import { openUsageQueue, UsageIngester } from './infra/usage/index.js';
import type { UsageQueue } from './infra/usage/port.js';
import { coreProjection } from './projections/core.js';
import type { Projection } from './projections/projection.js';
import { Queries } from './projections/queries.js';
import { ProjectionRunner } from './projections/runner.js';
import { usageTotalsProjection } from './projections/usageTotals.js';
import { type ChainRegistry, loadChains } from './gateway/chains.js';
import { TokenGatekeeper } from './gateway/gatekeeper.js';
import { TokenCache } from './gateway/tokenCache.js';
import { UpstreamPools } from './gateway/upstream.js';

/** Every projection the projector runs, in one place (the rebuild command uses it too). */
export const PROJECTIONS: Projection[] = [coreProjection, usageTotalsProjection];

export interface GatewayParts {
  chains: ChainRegistry;
  pools: UpstreamPools;
  tokens: TokenCache;
  gatekeeper: TokenGatekeeper;
}

/** The adapters and services of one process, chosen by the configuration (DESIGN §2). */
export interface Runtime {
  config: Config;
  store: EventStore;
  readModels: ReadModelStore;
  feed: ChangeFeed;
  limiter: Limiter;
  usageQueue: UsageQueue;
  queries: Queries;
  commands: AccountCommands;
  /** Present where this process projects (roles `all` and `projector`). */
  projector: ProjectionRunner | null;
  ingester: UsageIngester | null;
  /** Present where this process serves chain calls (roles `all` and `gateway`). */
  gateway: GatewayParts | null;
  now(): Date;
  api: ApiDeps;
  close(): Promise<void>;
}

export async function openRuntime(config: Config, now: () => Date = () => new Date()): Promise<Runtime> {
  const store = await openEventStore({ eventstoreUrl: config.eventstoreUrl, dataDir: config.dataDir });
  const readModels = await openReadModels({ mongodbUrl: config.mongodbUrl, dataDir: config.dataDir });
  const feed = await openChangeFeed({ redisUrl: config.redisUrl });
  const limiter = openLimiter({ redisUrl: config.redisUrl, failClosed: config.limitsFailClosed });
  const usageQueue = openUsageQueue({ redisUrl: config.redisUrl, consumer: `${hostname()}-${config.role}` });
  const queries = new Queries(readModels, now);
  const commands = new AccountCommands(store, config.plans, now);
  const projects = config.role === 'all' || config.role === 'projector';
  const projector = projects ? new ProjectionRunner(store, readModels, PROJECTIONS, feed) : null;
  const ingester = projects ? new UsageIngester({ queue: usageQueue, store }) : null;

  let gateway: GatewayParts | null = null;
  if (config.role === 'all' || config.role === 'gateway') {
    const chains = loadChains({ env: config.env });
    const tokens = new TokenCache(queries);
    await tokens.listen(feed);
    gateway = { chains, pools: new UpstreamPools(chains), tokens, gatekeeper: new TokenGatekeeper(tokens, limiter, config.plans) };
  }

  const waitFor = async (position: Position | null): Promise<void> => {
    if (position === null) return;
    if (projector) return projector.waitFor(position);
    // Another process projects: poll its checkpoint.
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      const checkpoint = await readModels.checkpoint(coreProjection.name);
      if (checkpoint !== null && checkpoint >= position) return;
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  return {
    config, store, readModels, feed, limiter, usageQueue, queries, commands, projector, ingester, gateway, now,
    api: {
      commands, queries, plans: config.plans, waitFor, adminToken: config.adminToken, secureCookies: config.secureCookies, now,
      sessions: new Sessions(readModels, now),
    },
    async close() {
      await gateway?.tokens.close();
      await gateway?.pools.close();
      // What the gateway served is recorded before the process goes: drain, then stop.
      if (ingester) {
        await ingester.whenDrained(5000).catch(() => undefined);
        await ingester.stop();
      }
      await projector?.stop();
      await usageQueue.close();
      await limiter.close();
      await feed.close();
      await readModels.close();
      await store.close();
    },
  };
}
