/**
 * A JSON-RPC batch's members that go to a node: as one upstream batch or each as a single call
 * (issue 34, docs/decisions.md). Both through the gateway's pool and JSON-RPC code
 * (bench/servers/batchForwarder.ts, a process of its own), to a fake EVM node in this process:
 * the forwarding process's CPU per member with the node answering at once, then the batches'
 * latency with the node taking 20–60 ms per HTTP request (it answers a batch in one go, as a
 * node that runs the members in parallel would). Node HTTP requests: 1 per batch against MEMBERS.
 *
 *   npx tsx bench/batch-forwarding.ts   (MEMBERS=10 per batch, BATCHES=1500 per round, ROUNDS=4, CONCURRENCY=8)
 */
import { FakeEvmChain, startEvmNodeFake } from '../test/support/fakeUpstreams.js';
import { Processes, runMain, timeLimit, tsNodeArgs } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';

const MEMBERS = Number(process.env.MEMBERS ?? 10);
const COMMAND = 'npx tsx bench/batch-forwarding.ts';

interface Round {
  mode: 'batch' | 'singles';
  cpuUsPerMember: number;
  latencies: number[];
}

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? 0;
};

async function forwarder(processes: Processes, nodeUrl: string, env: Record<string, string>): Promise<Round[]> {
  const started = processes.start('batch forwarder', process.execPath, tsNodeArgs('bench/servers/batchForwarder.ts'), {
    env: { NODE_URL: nodeUrl, MEMBERS: String(MEMBERS), ...env },
  });
  // Its whole output: the latencies make lines longer than the tail Processes keeps.
  let stdout = '';
  started.child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
  });
  const code = await started.exited;
  if (code !== 0) throw new Error(`batch forwarder exited ${code}: ${started.output().slice(-2_000)}`);
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{"mode"'))
    .map((l) => JSON.parse(l) as Round);
}

async function main(): Promise<void> {
  timeLimit(600);
  const processes = new Processes();
  const node = await startEvmNodeFake(new FakeEvmChain(1_000, 8));
  try {
    log(`CPU: batches of ${MEMBERS} to a node answering at once`);
    const cpuRounds = await forwarder(processes, node.url, {});
    const cpu = (mode: Round['mode']): number[] => cpuRounds.filter((r) => r.mode === mode).map((r) => r.cpuUsPerMember);
    const [batchCpu, singlesCpu] = [median(cpu('batch')), median(cpu('singles'))];
    log(
      `CPU µs per member by round: batch ${cpu('batch')
        .map((v) => v.toFixed(1))
        .join('/')}, singles ${cpu('singles')
        .map((v) => v.toFixed(1))
        .join('/')}`,
    );

    log('latency: the node takes 20–60 ms per HTTP request');
    node.latency = () => 20 + Math.random() * 40;
    const latencyRounds = await forwarder(processes, node.url, { BATCHES: '300', ROUNDS: '2' });
    const latencies = (mode: Round['mode']): number[] => latencyRounds.filter((r) => r.mode === mode).flatMap((r) => r.latencies);
    const p = (mode: Round['mode'], q: number): number => quantile(latencies(mode), q);
    log(
      `batch p50 ${p('batch', 0.5).toFixed(1)} p99 ${p('batch', 0.99).toFixed(1)} ms; singles p50 ${p('singles', 0.5).toFixed(1)} p99 ${p('singles', 0.99).toFixed(1)} ms`,
    );

    const method = `batches of ${MEMBERS} distinct eth_getBalance at 8 in flight through the gateway's pool (bench/servers/batchForwarder.ts), the forwarding process's CPU, medians of alternated rounds`;
    emit({
      name: 'batch_forwarding_cpu_one_batch_over_singles',
      target: null,
      result: round(batchCpu / singlesCpu),
      unit: 'ratio',
      baseline: `one upstream batch ${batchCpu.toFixed(1)} µs, singles ${singlesCpu.toFixed(1)} µs of CPU per member; node HTTP requests 1 against ${MEMBERS} per batch`,
      command: COMMAND,
      method,
    });
    emit({
      name: 'batch_forwarding_p50_one_batch_over_singles',
      target: null,
      result: round(p('batch', 0.5) / p('singles', 0.5)),
      unit: 'ratio',
      baseline: `one batch p50 ${p('batch', 0.5).toFixed(1)} ms p99 ${p('batch', 0.99).toFixed(1)} ms; singles p50 ${p('singles', 0.5).toFixed(1)} ms p99 ${p('singles', 0.99).toFixed(1)} ms`,
      command: COMMAND,
      method: 'the same, the node taking 20–60 ms (uniform) per HTTP request, a batch answered in one go',
    });
  } finally {
    await node.close();
    await processes.stopAll();
  }
}

runMain(main);
