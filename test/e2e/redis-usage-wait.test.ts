import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { keySlot } from '../../src/infra/redis/client.js';
import { RedisUsageQueue, type RedisUsageQueueOptions, streamIndexOf } from '../../src/infra/usage/redis.js';
import { recordFromWire } from '../../src/infra/usage/wire.js';
import { usageRecord } from '../contract/usagequeue.contract.js';
import { startTestRedisCluster, type TestRedisCluster } from '../support/redisCluster.js';
import { freePort, startTestRedisServer, type TestRedisServer, waitForPort } from '../support/redisServer.js';

/**
 * REDIS_USAGE_WAIT_REPLICAS: a call's answer leaves once its usage record is on the replicas asked
 * for (WAIT after the turn's XADDs, on the connection that carried them), so a hard failover right
 * after the answer does not lose it; replicas short by the bound (REDIS_USAGE_WAIT_MS): the answer
 * leaves all the same, counted, told once. Real redis-servers: one master and its replica, and a
 * cluster of three masters with a replica each.
 */

const opened: RedisUsageQueue[] = [];
const clients: Redis[] = [];

afterAll(async () => {
  await Promise.all(opened.map((queue) => queue.close()));
  for (const client of clients) client.disconnect();
});

async function openQueue(url: string, options: Partial<RedisUsageQueueOptions>): Promise<{ queue: RedisUsageQueue; logged: string[] }> {
  const logged: string[] = [];
  const queue = new RedisUsageQueue(url, {
    consumer: 'c',
    stream: `usage-wait-${Math.random().toString(36).slice(2)}`,
    log: (m) => logged.push(m),
    ...options,
  });
  opened.push(queue);
  await queue.whenReady(10_000);
  return { queue, logged };
}

function connect(port: number): Redis {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, retryStrategy: () => null });
  client.on('error', () => {});
  clients.push(client);
  return client;
}

/** What a metered call does: hands its record over, and answers once the queue says it may; how long that took. */
async function handOver(queue: RedisUsageQueue, records: UsageRecord[]): Promise<number> {
  const started = performance.now();
  for (const record of records) queue.enqueue(record);
  await new Promise<void>((resolve) => queue.whenHandedOver(resolve));
  return performance.now() - started;
}

/** Whether a record is in the newest entry of a stream on `server` (read at once, no retry). */
async function onServer(server: Redis, stream: string, record: UsageRecord): Promise<boolean> {
  const [entry] = (await server.xrevrange(stream, '+', '-', 'COUNT', 1)) as Array<[string, string[]]>;
  const fields = entry?.[1] ?? [];
  const at = fields.indexOf('b');
  const batch = at < 0 ? [] : (JSON.parse(fields[at + 1] ?? '[]') as unknown[]);
  return batch.some((wire) => recordFromWire(wire)?.requestId === record.requestId);
}

/** A redis-server's process id, as it reports it (for SIGSTOP / SIGCONT). */
async function processOf(server: Redis): Promise<number> {
  return Number(/process_id:(\d+)/.exec(await server.info('server'))?.[1]);
}

const records = (n: number, accountId = 'acc-1'): UsageRecord[] => Array.from({ length: n }, () => usageRecord({ accountId }));

describe('one master and its replica', () => {
  let master: TestRedisServer;
  let replicaPort: number;
  let replicaProcess: ChildProcess;
  let replicaDir: string;
  let masterClient: Redis;
  let replicaClient: Redis;

  beforeAll(async () => {
    master = await startTestRedisServer();
    masterClient = connect(master.port);
    // The replica's first sync at once, not after the master's 5 s wait for other replicas.
    await masterClient.config('SET', 'repl-diskless-sync-delay', '0');
    replicaPort = await freePort();
    replicaDir = mkdtempSync(join(tmpdir(), 'gw-redis-replica-'));
    replicaProcess = spawn(
      'redis-server',
      [
        '--port',
        String(replicaPort),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        replicaDir,
        '--replicaof',
        '127.0.0.1',
        String(master.port),
      ],
      { stdio: 'ignore' },
    );
    await waitForPort(replicaPort, true);
    replicaClient = connect(replicaPort);
    const deadline = Date.now() + 10_000;
    while (!/master_link_status:up/.test(await replicaClient.info('replication'))) {
      if (Date.now() > deadline) throw new Error('the replica did not sync');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }, 30_000);

  afterAll(async () => {
    replicaProcess?.kill('SIGCONT');
    replicaProcess?.kill('SIGKILL');
    await master?.stop();
    if (replicaDir) rmSync(replicaDir, { recursive: true, force: true });
  });

  it('answers only once the replica has the records: each is on it when the answer may leave', async () => {
    const { queue } = await openQueue(master.url, { waitReplicas: 1, replicaWaitMs: 2000 });
    const stream = queue.streams[0] as string;
    // Without WAIT (REDIS_USAGE_WAIT_REPLICAS=0) the replica lacked the newest entry at that moment in all 400, in each of 3 runs.
    const missing: number[] = [];
    for (let i = 0; i < 400; i++) {
      const batch = records(20);
      await handOver(queue, batch);
      if (!(await onServer(replicaClient, stream, batch[19] as UsageRecord))) missing.push(i);
    }
    expect(missing).toEqual([]);
    expect(queue.unreplicated).toBe(0);
    expect(/cmdstat_wait:calls=(\d+)/.exec(await masterClient.info('commandstats'))?.[1]).toBeDefined();
  });

  it('with the replica frozen, waits the bound, then answers, counts the records and says so once; asks again a second later', async () => {
    const { queue, logged } = await openQueue(master.url, { waitReplicas: 1, replicaWaitMs: 400 });
    const stream = queue.streams[0] as string;
    replicaProcess.kill('SIGSTOP');
    try {
      const first = records(5);
      const waited = await handOver(queue, first);
      expect(waited).toBeGreaterThanOrEqual(390);
      expect(waited).toBeLessThan(1200);
      expect(queue.unreplicated).toBe(5);
      // The master has them; only their copy is unconfirmed.
      expect(await onServer(masterClient, stream, first[4] as UsageRecord)).toBe(true);
      expect(logged).toHaveLength(1);
      expect(logged[0]).toMatch(/WAIT found 0 of 1 replica\(s\) within 400 ms on 127\.0\.0\.1:\d+: answers leave without/);

      // Short of replicas, the next answers do not each wait the bound: counted, not told again.
      for (let i = 0; i < 5; i++) expect(await handOver(queue, records(2))).toBeLessThan(200);
      expect(queue.unreplicated).toBe(15);
      expect(logged).toHaveLength(1);
    } finally {
      replicaProcess.kill('SIGCONT');
    }
    // A second on, WAIT is asked again; the replica answers: told once, nothing more counted.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await handOver(queue, records(1));
    expect(queue.unreplicated).toBe(15);
    expect(logged).toHaveLength(2);
    expect(logged[1]).toMatch(/1 replica\(s\) of 127\.0\.0\.1:\d+ confirm usage records again after \d+\.\d s; the answers of 15 records left meanwhile/);
    const batch = records(3);
    await handOver(queue, batch);
    expect(await onServer(replicaClient, stream, batch[2] as UsageRecord)).toBe(true);
  });

  it('sends no WAIT by default: answers on the master’s acknowledgement, the replica frozen or not', async () => {
    await masterClient.config('RESETSTAT');
    const { queue } = await openQueue(master.url, {});
    replicaProcess.kill('SIGSTOP');
    try {
      for (let i = 0; i < 5; i++) expect(await handOver(queue, records(3))).toBeLessThan(200);
    } finally {
      replicaProcess.kill('SIGCONT');
    }
    expect(queue.unreplicated).toBe(0);
    const stats = await masterClient.info('commandstats');
    expect(stats).toMatch(/cmdstat_xadd:calls=5\b/);
    expect(stats).not.toMatch(/cmdstat_wait:/);
  });
});

describe('a cluster: the WAIT goes to the master the stream’s XADD went to, on that connection', () => {
  let cluster: TestRedisCluster;
  beforeAll(async () => {
    cluster = await startTestRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 15_000 });
  }, 60_000);
  afterAll(async () => {
    for (const client of clients.splice(0)) client.disconnect();
    await Promise.all(opened.splice(0).map((queue) => queue.close()));
    await cluster?.stop();
  });

  it('waits on the master whose replica is frozen, not on the others; every record is on its master’s replica when answered', async () => {
    const { queue, logged } = await openQueue(cluster.url, { waitReplicas: 1, replicaWaitMs: 400 });
    const nodes = new Map(cluster.nodes.map((node) => [node.name, node]));
    const probe = connect(cluster.nodes[0]?.port as number);
    const slots = await probe.cluster('SLOTS');
    const masterOfSlot = (slot: number): string => {
      const range = slots.find(([from, to]) => slot >= from && slot <= to);
      return `${range?.[2]?.[0]}:${range?.[2]?.[1]}`;
    };
    // For each master, an account whose stream lives there, and the replica of that master.
    const streams = queue.streams;
    const byMaster = new Map<string, { accountId: string; stream: string; replica: Redis }>();
    for (let i = 0; byMaster.size < 3 && i < 1000; i++) {
      const accountId = `acc-${i}`;
      const stream = streams[streamIndexOf(accountId, streams.length)] as string;
      const master = masterOfSlot(keySlot(stream));
      if (byMaster.has(master)) continue;
      const replicaNode = cluster.nodes.find((node) => node.replicaOf?.name === master);
      expect(replicaNode, `a replica of ${master}`).toBeDefined();
      const replica = connect(replicaNode?.port as number);
      // A cluster replica serves reads of its master's slots only on a READONLY connection (MOVED otherwise).
      await replica.call('READONLY');
      byMaster.set(master, { accountId, stream, replica });
    }
    expect(byMaster.size).toBe(3);
    expect([...byMaster.keys()].every((name) => nodes.has(name))).toBe(true);

    // Normal case: each master's records on its replica at the moment the answer may leave. (These nodes fsync every
    // write before answering, which gave their replicas the time: without WAIT none was missing here either. What
    // proves the WAIT's way is below: sent to another master, or on another connection to the right one, it fails.)
    const missing: string[] = [];
    for (let i = 0; i < 60; i++) {
      for (const { accountId, stream, replica } of byMaster.values()) {
        const batch = records(10, accountId);
        await handOver(queue, batch);
        if (!(await onServer(replica, stream, batch[9] as UsageRecord))) missing.push(`${stream} #${i}`);
      }
    }
    expect(missing).toEqual([]);
    expect(queue.unreplicated).toBe(0);

    // One master's replica frozen: its streams' answers wait the bound; the others' do not.
    const [frozenMaster, frozen] = [...byMaster.entries()][0] as [string, { accountId: string; replica: Redis }];
    const others = [...byMaster.values()].slice(1);
    const pid = await processOf(frozen.replica);
    process.kill(pid, 'SIGSTOP');
    try {
      for (const { accountId } of others) expect(await handOver(queue, records(4, accountId))).toBeLessThan(200);
      expect(queue.unreplicated).toBe(0);
      const waited = await handOver(queue, records(4, frozen.accountId));
      expect(waited).toBeGreaterThanOrEqual(390);
      expect(queue.unreplicated).toBe(4);
      expect(logged).toEqual([expect.stringContaining(`replica(s) within 400 ms on ${frozenMaster}:`)]);
      // Records to the other masters in the same send: not counted, not told.
      const mixed = [...records(3, frozen.accountId), ...others.flatMap(({ accountId }) => records(3, accountId))];
      await handOver(queue, mixed);
      expect(queue.unreplicated).toBe(7);
      expect(logged).toHaveLength(1);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
  });
});
