import { hostname } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_RETRY } from './alerts/backoff.js';
import { AlertEvaluator } from './alerts/evaluator.js';
import { Notifier } from './alerts/notifier.js';
import { RollupAlertMetrics } from './alerts/rollupMetrics.js';
import { startAlertScheduler } from './alerts/scheduler.js';
import { AccountCommands } from './commands/accountCommands.js';
import { AlertCommands } from './commands/alertCommands.js';
import type { ApiDeps } from './commands/api/deps.js';
import { Sessions } from './commands/api/sessions.js';
import { AuthThrottle } from './commands/authThrottle.js';
import { PasswordHasher } from './commands/passwords.js';
import type { Config } from './config.js';
import { DomainError } from './domain/errors.js';
import type { Gatekeeper } from './gateway/admission.js';
import { openSharedCache, type SharedCache } from './gateway/cache/sharedCache.js';
import { type ChainRegistry, loadChains } from './gateway/chains.js';
import { TokenGatekeeper } from './gateway/gatekeeper.js';
import { TokenCache } from './gateway/tokenCache.js';
import { UpstreamPools } from './gateway/upstream.js';
import { openAttemptCounter } from './infra/attempts/index.js';
import { openChangeFeed } from './infra/changefeed/index.js';
import type { ChangeFeed } from './infra/changefeed/port.js';
import { openEventStore } from './infra/eventstore/index.js';
import type { EventStore, Position } from './infra/eventstore/port.js';
import { openGatewayInstances } from './infra/instances/index.js';
import { MemoryLimiter, openLimiter } from './infra/limits/index.js';
import { ownMonthlyLimitBefore, PlanChangeCounts } from './infra/limits/planChange.js';
import type { Limiter } from './infra/limits/port.js';
import { createSenders } from './infra/notify/index.js';
import { pingPostgres } from './infra/postgres/database.js';
import { acquireProjectorLock, type HeldProjectorLock, holdProjectorLock, type ProjectorLock } from './infra/postgres/projectorLock.js';
import { openReadModels } from './infra/readmodels/index.js';
import type { ReadModelStore } from './infra/readmodels/port.js';
import { type HealthLog, RedisHealth } from './infra/redisHealth.js';
import { untilReachable } from './infra/startup.js';
import { openStorageThread } from './infra/storagethread/index.js';
import { Telemetry } from './infra/telemetry.js';
import { openUsageQueue, RedisUsageQueue } from './infra/usage/index.js';
import type { Ingester } from './infra/usage/ingester.js';
import { type JournaledUsageSink, openJournaledSink } from './infra/usage/journal.js';
import type { UsageSink } from './infra/usage/port.js';
import { type ConnectionCounter, openConnectionCounter } from './infra/wsconnections/index.js';
import { AlertQueries } from './projections/alertsQueries.js';
import { PROJECTIONS, startProjecting } from './projections/all.js';
import { UsageQueries } from './projections/metricsQueries.js';
import { Queries } from './projections/queries.js';
import type { RetentionJob } from './projections/retention.js';
import { INVALIDATION_TOPIC, type Projector } from './projections/runner.js';

export interface GatewayParts {
  chains: ChainRegistry;
  pools: UpstreamPools;
  tokens: TokenCache;
  gatekeeper: Gatekeeper;
}

/** Alert rules; the evaluator and the notifier run where this process projects (they read the read models it keeps). */
export interface AlertParts {
  commands: AlertCommands;
  queries: AlertQueries;
  evaluator: AlertEvaluator | null;
  notifier: Notifier | null;
}

/** The adapters and services of one process, chosen by the configuration (DESIGN §2). */
export interface Runtime {
  config: Config;
  store: EventStore;
  readModels: ReadModelStore;
  feed: ChangeFeed;
  limiter: Limiter;
  /** Where the gateway hands usage records; the ingester reads the queue behind it, here or on the storage thread. */
  usageQueue: UsageSink;
  queries: Queries;
  commands: AccountCommands;
  /** Present where this process projects (roles `all` and `projector`), here or on the storage thread. */
  projector: Projector | null;
  ingester: Ingester | null;
  /** Present where this process serves chain calls (roles `all` and `gateway`). */
  gateway: GatewayParts | null;
  /** WebSocket connections per token against the plans' caps: in Redis (every gateway instance together) with REDIS_URL, else in process. */
  wsConnections: ConnectionCounter;
  telemetry: Telemetry;
  /** Present when the process uses Redis (REDIS_URL): whether it is reachable and answering, for /readyz and /metrics. */
  redis: RedisHealth | null;
  alerts: AlertParts;
  now(): Date;
  api: ApiDeps;
  close(): Promise<void>;
}

export interface RuntimeOptions {
  /** Where Redis outages are told (a warning when one starts, an info when it ends); the console by default. */
  log?: HealthLog;
}

const consoleLog: HealthLog = { warn: (message) => console.warn(message), info: (message) => console.info(message) };

export async function openRuntime(config: Config, clock?: () => Date, options: RuntimeOptions = {}): Promise<Runtime> {
  const now = clock ?? (() => new Date());
  // The production services may start after this process: wait for each, saying so, within STARTUP_TIMEOUT_SECONDS.
  const waiting = { deadlineMs: config.startupTimeoutMs, log: (message: string) => console.error(message) };
  const consumer = `${hostname()}-${config.role}`;
  const projects = config.role === 'all' || config.role === 'projector';
  // The storage thread runs on the real clock: a runtime given its own (tests) keeps its stores here.
  const embedded = config.role === 'all' && !config.eventstoreUrl && !config.mongodbUrl && !config.databaseUrl && !config.redisUrl;
  const storage =
    embedded && config.storageThread && clock === undefined
      ? await openStorageThread({
          dataDir: config.dataDir,
          consumer,
          plans: config.plans,
          usageSendEveryMs: config.usageSendEveryMs,
          usageLingerMs: config.usageLingerMs,
          // Without its stores the process can serve nothing well: it stops, for its supervisor to start it again.
          onFailure: (error) => {
            console.error(`storage thread failed: ${error.message}`);
            process.exit(1);
          },
        })
      : null;
  let store: EventStore;
  let readModels: ReadModelStore;
  let feed: ChangeFeed;
  let usageQueue: UsageSink;
  /** Records the usage queue dropped at its bound, where this process's queue is one (not behind the storage thread). */
  let droppedUsageRecords: (() => number) | undefined;
  /** With Redis: records answered without the replicas REDIS_USAGE_WAIT_REPLICAS asks for confirming them. */
  let unreplicatedUsageRecords: (() => number) | undefined;
  let projector: Projector | null = null;
  let ingester: Ingester | null = null;
  let retention: RetentionJob | null = null;
  let projectorLock: ProjectorLock | null = null;
  /** ROLE=all's lock, taken again when lost (the same as projectorLock). */
  let heldLock: HeldProjectorLock | null = null;
  /** Where this process projects on Redis: the account's monthly count at a plan change that turns custom limits off or on. */
  let planChanges: PlanChangeCounts | null = null;
  /** What must answer before this process goes on, when Redis is configured. */
  const redisClients: Array<{ whenReady(timeoutMs?: number): Promise<void> }> = [];
  if (storage) {
    ({ store, readModels, feed, usageQueue, projector, ingester } = storage);
  } else {
    // PostgreSQL serves what EventStoreDB or MongoDB does not; a schema it cannot use stops the process at once (no retry).
    const postgresUrl = config.databaseUrl && (!config.eventstoreUrl || !config.mongodbUrl) ? config.databaseUrl : undefined;
    if (postgresUrl) await untilReachable('PostgreSQL', postgresUrl, (timeoutMs) => pingPostgres(postgresUrl, timeoutMs), waiting);
    store = await openEventStore({ eventstoreUrl: config.eventstoreUrl, databaseUrl: postgresUrl, dataDir: config.dataDir });
    if (config.eventstoreUrl) await untilReachable('EventStoreDB', config.eventstoreUrl, () => store.headPosition(), waiting);
    readModels = config.mongodbUrl
      ? // Each attempt ends with the driver's own server selection timeout (30 s).
        await untilReachable('MongoDB', config.mongodbUrl, () => openReadModels({ mongodbUrl: config.mongodbUrl, dataDir: config.dataDir }), {
          ...waiting,
          attemptTimeoutMs: 35_000,
        })
      : await openReadModels({ databaseUrl: postgresUrl, dataDir: config.dataDir });
    const openedFeed = openChangeFeed({ redisUrl: config.redisUrl });
    const openedQueue = openUsageQueue({ redisUrl: config.redisUrl, consumer, streams: config.usageStreams, replicaWait: config.redisUsageWait });
    feed = openedFeed;
    usageQueue = openedQueue;
    droppedUsageRecords = () => openedQueue.dropped;
    if (openedQueue instanceof RedisUsageQueue) unreplicatedUsageRecords = () => openedQueue.unreplicated;
    redisClients.push(openedFeed, openedQueue);
    if (projects && config.redisUrl) {
      const tokens = new Queries(readModels, now);
      planChanges = new PlanChangeCounts(config.redisUrl, {
        plans: config.plans,
        ownLimitTokens: (accountId) => tokens.tokenIdsWithOwnMonthlyLimit(accountId),
        tokenCounting: async (tokenId) => {
          const token = await tokens.tokenDoc(tokenId);
          if (token === null) return null;
          const account = await tokens.account(token.accountId);
          const custom = account !== null && (config.plans[account.plan]?.custom_limits ?? false);
          return { accountId: token.accountId, apart: custom && token.monthlyLimit !== null };
        },
        ownLimitBefore: (change) => ownMonthlyLimitBefore(store, change),
        now: () => now().getTime(),
      });
      redisClients.push(planChanges);
    }
    const project = (): void => {
      const parts = startProjecting({ store, readModels, feed, usageQueue: openedQueue, plans: config.plans, now, lingerMs: config.usageLingerMs });
      ({ projector, ingester, retention } = parts);
      if (planChanges) parts.projector.follow(planChanges);
      // ROLE=all on PostgreSQL: a projection stopped by a store error starts anew once its lock is taken again.
      const held = heldLock;
      if (held) {
        parts.projector.onFailure((error) => {
          if (projector === parts.projector) void held.restart(error);
        });
      }
    };
    if (projects && postgresUrl) {
      // One projector per database: a second one started by mistake waits here, saying so.
      const log = (message: string) => console.error(message);
      if (config.role === 'all') {
        // It also serves chain calls and the API: those go on while projecting waits for the lock again.
        heldLock = await holdProjectorLock(postgresUrl, {
          log,
          onLost: () => stopProjecting(),
          onRegained: async () => {
            project();
            await resumeProjecting();
          },
        });
        projectorLock = heldLock;
      } else {
        projectorLock = await acquireProjectorLock(postgresUrl, {
          log,
          onLost: (error) => {
            console.error(`projector lock lost (${error.message}): stopping, so that another projector can take over`);
            process.exit(1);
          },
        });
      }
    }
    if (projects) project();
  }
  // The embedded default journals each record before its call is answered (a kill loses none).
  let journaled: JournaledUsageSink | null = null;
  if (config.role === 'all' && !config.redisUrl) {
    const inner = usageQueue;
    const appendedThrough = inner.appendedThrough?.bind(inner);
    if (appendedThrough) {
      journaled = openJournaledSink({ dir: join(config.dataDir, 'usage-journal'), fsync: config.usageJournalFsync }, inner, appendedThrough);
      usageQueue = journaled;
    }
  }
  const limiter = openLimiter({
    redisUrl: config.redisUrl,
    failClosed: config.limitsFailClosed,
    // A month's count starts from the usage totals (once the projector has caught up with the log): in process, and on Redis where a counter was lost.
    usedBefore: async (bucket, nowMs) => {
      await projector?.caughtUp;
      return queries.bucketMonthUsage(bucket, nowMs, config.plans);
    },
    accounts: {
      customLimits: async (accountId) => {
        await projector?.caughtUp;
        const account = await queries.account(accountId);
        return account !== null && (config.plans[account.plan]?.custom_limits ?? false);
      },
      ownLimitTokens: (accountId) => queries.tokenIdsWithOwnMonthlyLimit(accountId),
      accountOf: async (tokenId) => (await queries.tokenDoc(tokenId))?.accountId ?? null,
    },
  });
  redisClients.push(limiter);
  // In process, an account's month follows a plan change that turns custom limits off or on, and
  // a token's own limit set or removed, when the change notice arrives (with Redis the projector
  // moves it before: planChange.ts).
  const unfollowPlanChanges =
    limiter instanceof MemoryLimiter
      ? await feed.subscribe(INVALIDATION_TOPIC, (message) => {
          const nowMs = now().getTime();
          const followed = message.startsWith('account:')
            ? limiter.accountPlanChanged(message.slice('account:'.length), nowMs)
            : message.startsWith('token:')
              ? limiter.tokenChanged(message.slice('token:'.length), nowMs)
              : null;
          followed?.catch((error: unknown) => {
            console.warn(`limits: the account's monthly count did not follow ${message}'s change (${error instanceof Error ? error.message : String(error)})`);
          });
        })
      : null;
  // Counted in Redis only where the management API is served; elsewhere nothing asks.
  const servesApi = config.role === 'all' || config.role === 'api';
  const attempts = openAttemptCounter({ redisUrl: servesApi ? config.redisUrl : undefined });
  redisClients.push(attempts);
  const servesGateway = config.role === 'all' || config.role === 'gateway';
  const wsConnections = openConnectionCounter({
    redisUrl: servesGateway ? config.redisUrl : undefined,
    instanceTtlMs: config.wsInstanceTtlMs,
    log: options.log ?? consoleLog,
  });
  redisClients.push(wsConnections);
  // Each node's maxRps is shared among the live gateways (with Redis; alone, this one has it all).
  const instances = openGatewayInstances(servesGateway ? config.redisUrl : undefined, { ttlMs: config.wsInstanceTtlMs });
  redisClients.push(instances);
  const redis = config.redisUrl ? new RedisHealth(config.redisUrl, { log: options.log ?? consoleLog }) : null;
  if (redis) redisClients.push(redis);
  if (config.redisUrl) {
    await untilReachable(
      'Redis',
      config.redisUrl,
      async (timeoutMs) => {
        await Promise.all(redisClients.map((client) => client.whenReady(timeoutMs)));
      },
      waiting,
    );
  }
  const queries = new Queries(readModels, now);
  const commands = new AccountCommands(store, config.plans, now, new PasswordHasher({ concurrency: config.auth.hashConcurrency }));

  let gateway: GatewayParts | null = null;
  let sharedCache: SharedCache | null = null;
  const telemetry = new Telemetry({
    usageQueueDepth: () => usageQueue.depth(),
    projectionLagMs: () => projector?.lastLagMs ?? null,
    cachedTokens: () => gateway?.tokens.size ?? 0,
    responseCache: () => gateway?.pools.cache ?? null,
    sharedCache: () => sharedCache?.stats ?? null,
    upstreams: () => gateway?.pools.health() ?? {},
    redis: redis ? () => redis.snapshot() : undefined,
    unjournaledRecords: journaled ? () => journaled.journal.unjournaled : undefined,
    droppedUsageRecords,
    unreplicatedUsageRecords,
  });
  if (config.role === 'all' || config.role === 'gateway') {
    const chains = loadChains({ env: config.env });
    const tokens = new TokenCache(queries);
    await tokens.listen(feed);
    const pools = new UpstreamPools(chains, {
      cacheBytes: config.responseCacheBytes,
      filterIdSecret: config.filterIdSecret,
      warn: (message) => console.error(message),
    });
    // Not waited for at start: a lookup Redis cannot answer goes to the node (fail open).
    if (config.responseCacheRedisUrl && pools.cache) {
      sharedCache = openSharedCache(config.responseCacheRedisUrl);
      pools.cache.shareWith(sharedCache);
    }
    pools.shareBudgets(instances.count());
    instances.onCount((count) => pools.shareBudgets(count));
    gateway = { chains, pools, tokens, gatekeeper: new TokenGatekeeper(tokens, telemetry.countDecisions(limiter), config.plans) };
  }

  const waitFor = async (position: Position | null): Promise<void> => {
    if (position === null) return;
    if (projector) return projector.waitFor(position);
    // Another process projects: poll its checkpoints, every projection's (it commits them one
    // after the other, core first: an alert read right after core's had it was not there yet).
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      const checkpoints = await Promise.all(PROJECTIONS.map((p) => readModels.checkpoint(p.name)));
      if (checkpoints.every((checkpoint) => checkpoint !== null && checkpoint >= position)) return;
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  const alertQueries = new AlertQueries(readModels);
  const alertCommands = new AlertCommands(
    store,
    config.plans,
    {
      planOf: async (accountId) => (await commands.account(accountId)).plan,
      tokenOf: async (accountId, tokenId) => {
        const token = await commands.apiToken(accountId, tokenId).catch((e: unknown) => {
          if (e instanceof DomainError && e.code === 'not_found') return null;
          throw e;
        });
        return token && token.status !== 'revoked' && token.status !== 'expired' ? token : null;
      },
      alertIdsOf: (accountId) => alertQueries.alertIds(accountId),
    },
    now,
  );
  const reportAlertError = (e: unknown) => console.error(`alerts: ${e instanceof Error ? e.message : String(e)}`);
  const notify = projects ? createSenders(config.notify) : null;
  const notifier = notify
    ? new Notifier({
        alerts: alertQueries,
        queries,
        plans: config.plans,
        commands: alertCommands,
        senders: notify.senders,
        waitFor,
        now,
        onError: reportAlertError,
        retry: { ...DEFAULT_RETRY, maxAttempts: config.notify.maxAttempts, baseMs: config.notify.retryBaseMs },
      })
    : null;
  const evaluator = projects
    ? new AlertEvaluator({
        alerts: alertQueries,
        queries,
        plans: config.plans,
        commands: alertCommands,
        now,
        waitFor,
        onError: reportAlertError,
        metrics: new RollupAlertMetrics(new UsageQueries(readModels), queries, config.plans),
      })
    : null;
  const scheduleAlerts = () =>
    evaluator && notifier ? startAlertScheduler(evaluator, notifier, { evaluateEveryMs: config.alerts.evaluateEveryMs, onError: reportAlertError }) : null;
  let alertScheduler = scheduleAlerts();
  /** Everything that works as the one projector of the database; stopped while ROLE=all has lost its lock. */
  const stopProjecting = async (): Promise<void> => {
    await alertScheduler?.stop();
    alertScheduler = null;
    await ingester?.stop();
    await retention?.stop();
    await projector?.stop();
  };
  const resumeProjecting = async (): Promise<void> => {
    await projector?.start();
    ingester?.start();
    alertScheduler = scheduleAlerts();
  };

  return {
    config,
    store,
    readModels,
    feed,
    limiter,
    usageQueue,
    queries,
    commands,
    // Getters: ROLE=all on PostgreSQL starts new ones after taking its lost projector lock again.
    get projector() {
      return projector;
    },
    get ingester() {
      return ingester;
    },
    gateway,
    wsConnections,
    telemetry,
    redis,
    now,
    alerts: { commands: alertCommands, queries: alertQueries, evaluator, notifier },
    api: {
      alerts: alertCommands,
      alertQueries,
      commands,
      queries,
      plans: config.plans,
      waitFor,
      adminToken: config.adminToken,
      secureCookies: config.secureCookies,
      now,
      sessions: new Sessions(readModels, now),
      authThrottle: new AuthThrottle(attempts, config.auth, now),
      usage: new UsageQueries(readModels),
      chainIds: (gateway?.chains ?? loadChains({ env: config.env })).list().map((c) => c.id),
      // Only this process's gateway: its sockets are counted nowhere else (see the TokenMetrics schema).
      liveWebSockets: (tokenId: string) => {
        const sockets = telemetry.webSockets();
        const mine = sockets?.byToken.find((t) => t.tokenId === tokenId);
        return sockets === null ? null : { connections: mine?.connections ?? 0, subscriptions: mine?.subscriptions ?? 0 };
      },
    },
    async close() {
      // Not taken again (nor projecting started) while the rest stops.
      await heldLock?.stopRegaining();
      // Deliveries under way finish (bounded) while the stores are still open; the rest resume after a restart.
      await alertScheduler?.stop();
      await notify?.close();
      await gateway?.tokens.close();
      await gateway?.pools.close();
      // It calls no node from here on: the other gateways take its share of each node's maxRps now, not after the drain.
      await instances.close();
      await sharedCache?.close();
      // What the gateway served is recorded before the process goes: drain, then stop.
      if (ingester) {
        await ingester.whenDrained(5000).catch(() => undefined);
        await ingester.stop();
      }
      await retention?.stop();
      await projector?.stop();
      await planChanges?.close();
      await projectorLock?.release();
      await usageQueue.close();
      await unfollowPlanChanges?.();
      await limiter.close();
      await attempts.close();
      await wsConnections.close();
      await feed.close();
      await readModels.close();
      await store.close();
      await storage?.close();
      await redis?.stop();
      telemetry.close();
    },
  };
}
