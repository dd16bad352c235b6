import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';
import { freePorts, waitForPort } from './redisServer.js';

const run = promisify(execFile);

/** One node of a test cluster: a master, which a test may kill and start again on its port with its data. */
export interface TestClusterNode {
  port: number;
  /** host:port, as the cluster and its errors name it. */
  name: string;
  stop(): Promise<void>;
  /** Nothing when it runs already. */
  start(): Promise<void>;
}

export interface TestRedisCluster {
  /** redis+cluster://127.0.0.1:<port>,… with every master as a seed. */
  url: string;
  nodes: TestClusterNode[];
  /** Resolves once every node says cluster_state:ok (after a node was started again). */
  whenOk(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A real Redis Cluster of `masters` masters (no replicas) on free loopback ports, made as an
 * operator would: `redis-server --cluster-enabled yes` per node, then `redis-cli --cluster
 * create`. Each node keeps an append-only file synced on every write, so a master killed and
 * started again comes back with everything it acknowledged. `stop` removes the nodes' files.
 */
export async function startTestRedisCluster(options: { masters?: number } = {}): Promise<TestRedisCluster> {
  const count = options.masters ?? 3;
  const root = mkdtempSync(join(tmpdir(), 'gw-redis-cluster-'));
  const nodes: Array<TestClusterNode & { child?: ChildProcess }> = [];
  // Every node's port and cluster-bus port, distinct (port + 10000, the bus's default, may be taken or past 65535).
  const ports = await freePorts(2 * count);
  for (let i = 0; i < count; i++) {
    const port = ports[2 * i] as number;
    const busPort = ports[2 * i + 1] as number;
    const node: TestClusterNode & { child?: ChildProcess } = {
      port,
      name: `127.0.0.1:${port}`,
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
            '2000',
            '--appendonly',
            'yes',
            '--appendfsync',
            'always',
            '--save',
            '',
            '--dir',
            root,
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
    url: `redis+cluster://${nodes.map((n) => n.name).join(',')}`,
    nodes,
    async whenOk() {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const states = await Promise.all(
          nodes.map((n) =>
            cli(n.port, 'cluster', 'info').then(
              (info) => /cluster_state:ok/.test(info),
              () => false,
            ),
          ),
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
    await run('redis-cli', ['--cluster', 'create', ...nodes.map((n) => n.name), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 });
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
