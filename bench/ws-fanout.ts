/**
 * WebSocket fan-out and calls, three processes: this one (a fake EVM node over HTTP and
 * WebSocket whose heads the bench sends: test/support/fakeWsUpstream.ts), the gateway
 * (bench/ws-fanout-gateway.ts) and the clients (bench/ws-fanout-clients.ts, 5,000 per process).
 * N clients subscribe to newHeads, one upstream subscription serves them all. Figures:
 * - delivery time from the node's send of a head to the last client's receipt of it, p50/p99 over the blocks;
 * - the gateway's RSS per idle connection (its process only, after a full collection, before and after the N upgrades);
 * - the gateway's CPU per delivered notification (its process, all threads, /proc: admission, metering, send);
 * - request/response calls per second over WebSocket against HTTP keep-alive, same run, same
 *   gateway, same number of connections (each sending its next call when answered), alternated.
 *   node --expose-gc --import tsx bench/ws-fanout.ts [clients=10000] [blocks=30]
 */
import { type ChildProcess, fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { startFakeWsUpstream } from '../test/support/fakeWsUpstream.js';
import { cpuSeconds, rssMb, waitForIdle } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';
import type { FromClients, ToClients } from './ws-fanout-clients.js';
import type { FromGateway, ToGateway } from './ws-fanout-gateway.js';

const clients = Number(process.argv[2] ?? 10_000);
const blocks = Number(process.argv[3] ?? 30);
const PER_PROCESS = 5000;
const LOAD_CONNECTIONS = 32;
const LOAD_SECONDS = 4;
const LOAD_ROUNDS = 3;
const command = `node --expose-gc --import tsx bench/ws-fanout.ts ${clients} ${blocks}`;
const now = () => performance.timeOrigin + performance.now();
const execArgv = ['--expose-gc', '--import', 'tsx'];
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

/** The next IPC message of a child that passes `test`. */
function next<T>(child: ChildProcess, test: (m: T) => boolean): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: T) => {
      if (!test(m)) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m);
    };
    const onExit = (code: number | null) => reject(new Error(`child ${child.pid} exited (${code}) before answering`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

const node = await startFakeWsUpstream();
const children: ChildProcess[] = [];
process.on('exit', () => {
  for (const c of children) c.kill();
});

const gateway = fork(here('./ws-fanout-gateway.ts'), [node.httpUrl, node.wsUrl], { execArgv, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
children.push(gateway);
const toGateway = (m: ToGateway) => gateway.send(m);
const { port, token } = await next<FromGateway & { type: 'ready' }>(gateway, (m) => (m as FromGateway).type === 'ready');
const gatewayPid = gateway.pid as number;
const stats = async () => {
  toGateway({ type: 'stats' });
  return next<FromGateway & { type: 'stats' }>(gateway, (m) => (m as FromGateway).type === 'stats');
};
/** The gateway's RSS and live heap (with buffers outside it) after a full collection. */
const collected = async () => {
  toGateway({ type: 'gc' });
  const { liveBytes } = await next<FromGateway & { type: 'gc' }>(gateway, (m) => (m as FromGateway).type === 'gc');
  await new Promise((r) => setTimeout(r, 300));
  return { rssMb: rssMb(gatewayPid), liveMb: liveBytes / 1024 / 1024 };
};
/** Until the gateway has ingested what the previous phase metered (its storage thread), so a phase does not pay for the one before. */
const settled = () => waitForIdle([gatewayPid], { maxShare: 0.1 });
log(`gateway pid ${gatewayPid} on port ${port}`);

await settled();
const before = await collected();
const wsUrl = `ws://127.0.0.1:${port}/local/${token}`;
const groups: Array<{ child: ChildProcess; size: number }> = [];
for (let i = 0; i < clients; i += PER_PROCESS) {
  const size = Math.min(PER_PROCESS, clients - i);
  const child = fork(here('./ws-fanout-clients.ts'), [wsUrl, String(size)], { execArgv, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  children.push(child);
  groups.push({ child, size });
}
await Promise.all(groups.map(({ child }) => next<FromClients>(child, (m) => m.type === 'opened')));
log(`${clients} clients connected`);
const after = await collected();
const rssPerIdleConnectionKb = ((after.rssMb - before.rssMb) * 1024) / clients;
const livePerIdleConnectionKb = ((after.liveMb - before.liveMb) * 1024) / clients;

for (const { child } of groups) child.send({ type: 'subscribe' } satisfies ToClients);
await Promise.all(groups.map(({ child }) => next<FromClients>(child, (m) => m.type === 'subscribed')));
const subscribed = await stats();
log(`subscriptions ${subscribed.subscriptions}, upstream ${subscribed.upstreamSubscriptions}`);
while (node.subscribeCalls === 0) await new Promise((r) => setTimeout(r, 20));

const latencies: number[] = [];
await settled();
const cpuBefore = cpuSeconds(gatewayPid);
for (let b = 0; b < blocks; b++) {
  const arrivals = groups.map(({ child }) => next<FromClients & { type: 'block' }>(child, (m) => m.type === 'block'));
  const sentAt = now();
  const head = node.mine();
  const received = await Promise.all(arrivals);
  if (received.some((r) => r.number !== Number.parseInt(head.number, 16))) throw new Error('a client got another head than the one sent');
  latencies.push(Math.max(...received.map((r) => r.lastAt)) - sentAt);
}
// Including the metering of the last heads' notifications, which the storage thread finishes after them.
await settled();
const cpuPerNotificationUs = ((cpuSeconds(gatewayPid) - cpuBefore) * 1e6) / (blocks * clients);
latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((latencies.length * p) / 100))] as number;

for (const { child } of groups) child.send({ type: 'close' } satisfies ToClients);
await Promise.all(groups.map(({ child }) => next<FromClients>(child, (m) => m.type === 'closed')));
while ((await stats()).connections > 0) await new Promise((r) => setTimeout(r, 100));

// Calls: one client process, the same connections over each transport in turn.
const loader = (groups[0] as { child: ChildProcess }).child;
const body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}';
const rates: Record<'ws' | 'http', number[]> = { ws: [], http: [] };
/** The gateway's CPU per call (its process, all threads): the client side's costs differ between the transports, this does not include them. */
const cpuPerCall: Record<'ws' | 'http', number[]> = { ws: [], http: [] };
for (let pass = 0; pass < LOAD_ROUNDS; pass++) {
  for (const transport of ['ws', 'http'] as const) {
    const url = transport === 'ws' ? wsUrl : `http://127.0.0.1:${port}/local/${token}`;
    await settled();
    const cpuAtStart = cpuSeconds(gatewayPid);
    loader.send({ type: 'load', transport, url, connections: LOAD_CONNECTIONS, seconds: LOAD_SECONDS, body } satisfies ToClients);
    const r = await next<FromClients & { type: 'load' }>(loader, (m) => m.type === 'load');
    await settled();
    cpuPerCall[transport].push(((cpuSeconds(gatewayPid) - cpuAtStart) * 1e6) / r.calls);
    if (r.errors > 0) throw new Error(`${r.errors} of ${r.calls} calls over ${transport} failed`);
    rates[transport].push(r.calls / LOAD_SECONDS);
    log(`${transport}: ${Math.round(r.calls / LOAD_SECONDS)} calls/s, gateway ${round(cpuPerCall[transport].at(-1) as number)} µs CPU a call`);
  }
}
const wsRate = median(rates.ws);
const httpRate = median(rates.http);
const wsCpu = median(cpuPerCall.ws);
const httpCpu = median(cpuPerCall.http);

const method = `${clients} clients in ${groups.length} process(es), ${subscribed.upstreamSubscriptions} upstream subscription, ${blocks} heads`;
emit({
  name: 'ws_fanout_last_client_p50_ms',
  target: null,
  result: round(pct(50)),
  unit: 'ms',
  command,
  method: `${method}: the node's send of a head to the last client's receipt`,
});
emit({ name: 'ws_fanout_last_client_p99_ms', target: null, result: round(pct(99)), unit: 'ms', command, method });
emit({
  name: 'ws_rss_per_idle_connection_kb',
  target: null,
  result: round(rssPerIdleConnectionKb),
  unit: 'KB',
  command,
  method: `gateway process only, after a full collection: ${round(before.rssMb)} → ${round(after.rssMb)} MB`,
});
emit({
  name: 'ws_live_heap_per_idle_connection_kb',
  target: null,
  result: round(livePerIdleConnectionKb),
  unit: 'KB',
  command,
  method: `gateway process, V8 heap used + external after a full collection: ${round(before.liveMb)} → ${round(after.liveMb)} MB`,
});
emit({
  name: 'ws_cpu_per_notification_us',
  target: null,
  result: round(cpuPerNotificationUs),
  unit: 'µs',
  command,
  method: 'gateway process only, all threads (/proc/<pid>/stat)',
});
emit({
  name: 'ws_vs_http_keepalive_calls_per_second',
  target: null,
  result: round(wsRate),
  unit: 'calls/s',
  ratio: round(wsRate / httpRate),
  baseline: `HTTP keep-alive ${round(httpRate)} calls/s`,
  command,
  method: `eth_blockNumber, ${LOAD_CONNECTIONS} connections each way, one call in flight per connection, ${LOAD_ROUNDS} alternated rounds of ${LOAD_SECONDS} s, medians; the load generator shares the 2 cores`,
});
emit({
  name: 'ws_vs_http_keepalive_gateway_cpu_per_call_us',
  target: null,
  result: round(wsCpu),
  unit: 'µs',
  ratio: round(wsCpu / httpCpu),
  baseline: `HTTP keep-alive ${round(httpCpu)} µs`,
  command,
  method: 'gateway process, all threads, per call of the rounds above, the metering of each round included',
});

for (const { child } of groups) child.kill();
toGateway({ type: 'stop' });
await new Promise((resolve) => gateway.once('exit', resolve));
await node.close();
