import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';
import { freePorts, waitForPort } from './redisServer.js';

const run = promisify(execFile);

/** One node of a test cluster, which a test may kill and start again on its port with its data. */
export interface TestClusterNode {
  port: number;
  /** host:port, as the cluster and its errors name it. */
  name: string;
  /** The master it was made a replica of when the cluster was made; null for a master. A failover swaps roles afterwards: ask the nodes. */
  replicaOf: TestClusterNode | null;
  /** Whether its process runs (not stopped by the test). */
  readonly running: boolean;
  /** kill -9: nothing is flushed, its connections drop. */
  stop(): Promise<void>;
  /** Nothing when it runs already. */
  start(): Promise<void>;
}

export interface TestRedisCluster {
  /** redis+cluster://127.0.0.1:<port>,… with every master as a seed. */
  url: string;
  /** The masters, then the replicas (in the order of their masters). */
  nodes: TestClusterNode[];
  /** Resolves once every running node says cluster_state:ok and every running replica's link to its master is up (after a node was started again). */
  whenOk(): Promise<void>;
  stop(): Promise<void>;
}

export interface TestRedisClusterOptions {
  /** Masters, each serving an equal share of the slots (default 3). */
  masters?: number;
  /** Replicas of each master (default 0), joined as `redis-cli --cluster add-node … --cluster-slave` joins one. */
  replicas?: number;
  /** `cluster-node-timeout` of every node (default 2000): how long a master is unreachable before it is failed and its replica may take over. */
  nodeTimeoutMs?: number;
}

/**
 * A real Redis Cluster of `masters` masters, each with `replicas` replicas (none by default), on
 * free loopback ports, made as an operator would: `redis-server --cluster-enabled yes` per node,
 * `redis-cli --cluster create` of the masters, then each replica joined to its master as `redis-cli
 * --cluster add-node --cluster-slave` does it (CLUSTER MEET, CLUSTER REPLICATE). Each node keeps an append-only file synced on every write, so a master killed
 * and started again comes back with everything it acknowledged (a replica's copy is only as
 * complete as asynchronous replication made it). `stop` removes the nodes' files.
 */
export async function startTestRedisCluster(options: TestRedisClusterOptions = {}): Promise<TestRedisCluster> {
  const masters = options.masters ?? 3;
  const count = masters * (1 + (options.replicas ?? 0));
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 2000;
  const root = mkdtempSync(join(tmpdir(), 'gw-redis-cluster-'));
  const nodes: Array<TestClusterNode & { child?: ChildProcess }> = [];
  // Every node's port and cluster-bus port, distinct (port + 10000, the bus's default, may be taken or past 65535).
  const ports = await freePorts(2 * count);
  const busPortOf = new Map<number, number>();
  for (let i = 0; i < count; i++) {
    const port = ports[2 * i] as number;
    const busPort = ports[2 * i + 1] as number;
    busPortOf.set(port, busPort);
    const node: TestClusterNode & { child?: ChildProcess } = {
      port,
      name: `127.0.0.1:${port}`,
      replicaOf: i < masters ? null : (nodes[i % masters] as TestClusterNode),
      get running() {
        return node.child !== undefined && node.child.exitCode === null;
      },
      async start() {
        if (node.child && node.child.exitCode === null) return;
        node.child = spawn(
          'redis-server',
          [
            '--port',
            String(port),
            '--bind',
            '127.0.0.1',
            '--cluster-enabled',
            'yes',
            '--cluster-port',
            String(busPort),
            '--cluster-config-file',
            join(root, `nodes-${port}.conf`),
            '--cluster-node-timeout',
            String(nodeTimeoutMs),
            '--appendonly',
            'yes',
            '--appendfsync',
            'always',
            '--save',
            '',
            '--dir',
            root,
            // A replica's first sync starts at once, not after the default 5 s wait for others to join it.
            '--repl-diskless-sync-delay',
            '0',
            '--appendfilename',
            `appendonly-${port}.aof`,
            '--appenddirname',
            `aof-${port}`,
          ],
          { stdio: 'ignore' },
        );
        await waitForPort(port, true);
      },
      async stop() {
        const running = node.child;
        node.child = undefined;
        if (!running || running.exitCode !== null) return;
        const exited = new Promise((resolve) => running.once('exit', resolve));
        running.kill('SIGKILL');
        await exited;
        await waitForPort(port, false);
      },
    };
    nodes.push(node);
  }
  const cluster: TestRedisCluster = {
    url: `redis+cluster://${nodes
      .slice(0, masters)
      .map((n) => n.name)
      .join(',')}`,
    nodes,
    async whenOk() {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const states = await Promise.all(
          nodes
            .filter((n) => n.running)
            .map(async (n) => {
              try {
                if (!/cluster_state:ok/.test(await cli(n.port, 'cluster', 'info'))) return false;
                const replication = await cli(n.port, 'info', 'replication');
                if (/role:slave/.test(replication) && !/master_link_status:up/.test(replication)) return false;
                // Every running node is known to it as what it is: as many masters serving slots and replicas as run.
                const known = (await cli(n.port, 'cluster', 'nodes'))
                  .trim()
                  .split('\n')
                  .map((line) => line.split(' '))
                  .filter((fields) => !/fail|handshake|noaddr/.test(fields[2] ?? ''));
                const serving = known.filter((fields) => /master/.test(fields[2] ?? '') && fields.length > 8).length;
                const replicas = known.filter((fields) => /slave/.test(fields[2] ?? '')).length;
                return serving === masters && replicas === nodes.filter((other) => other.running).length - masters;
              } catch {
                return false;
              }
            }),
        );
        if (states.every(Boolean)) return;
        if (Date.now() > deadline) throw new Error('test cluster: cluster_state not ok after 20 s');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    async stop() {
      // Every node's files go, even when one did not stop in time.
      const stopped = await Promise.allSettled(nodes.map((n) => n.stop()));
      rmSync(root, { recursive: true, force: true });
      const failed = stopped.find((result) => result.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
  try {
    await Promise.all(nodes.map((n) => n.start()));
    await run('redis-cli', ['--cluster', 'create', ...nodes.slice(0, masters).map((n) => n.name), '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: 30_000,
    });
    // What `redis-cli --cluster add-node <replica> <master> --cluster-slave` does, for every replica at
    // once (add-node joins one at a time, a second or more each): meet the master, then replicate it
    // once the handshake made its id known.
    await Promise.all(
      nodes.slice(masters).map(async (node) => {
        const master = node.replicaOf as TestClusterNode;
        const id = (await cli(master.port, 'cluster', 'myid')).trim();
        await cli(node.port, 'cluster', 'meet', '127.0.0.1', String(master.port), String(busPortOf.get(master.port)));
        const deadline = Date.now() + 20_000;
        while (!(await cli(node.port, 'cluster', 'nodes')).includes(id)) {
          if (Date.now() > deadline) throw new Error(`test cluster: ${node.name} did not learn of ${master.name}`);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        const answer = await cli(node.port, 'cluster', 'replicate', id);
        if (!/OK/.test(answer)) throw new Error(`test cluster: CLUSTER REPLICATE on ${node.name}: ${answer.trim()}`);
      }),
    );
    await cluster.whenOk();
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 5000 });
  return stdout;
}

/** A cluster started before the file's tests and stopped after them; the function hands it to them. */
export function clusterForThisFile(): () => TestRedisCluster {
  let cluster: TestRedisCluster | undefined;
  beforeAll(async () => {
    cluster = await startTestRedisCluster();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  return () => {
    if (cluster === undefined) throw new Error('the test Redis Cluster is not started yet');
    return cluster;
  };
}
