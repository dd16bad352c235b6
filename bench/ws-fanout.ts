/**
 * WebSocket fan-out: N clients subscribed to newHeads through one upstream subscription (ganache
 * behind the gateway, every part in this process). Reports the time from the mining call to the
 * last client's notification (p50/p99 over the blocks; includes ganache's mining), RSS per idle
 * connection (gateway and client sides together: an upper bound for the gateway's), and CPU per
 * delivered notification (the whole process, clients included).
 *   npx tsx bench/ws-fanout.ts [clients=2000] [blocks=30]
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { startDevnet } from '../src/infra/devnet.js';
import { ADMIN_TOKEN, owner, startTestApp } from '../test/support/testApp.js';

const clients = Number(process.argv[2] ?? 2000);
const blocks = Number(process.argv[3] ?? 30);

const dataDir = mkdtempSync(join(tmpdir(), 'ws-bench-'));
const node = await startDevnet();
// Every notification is admitted and metered: one token's rate must not refuse the fan-out of a head to N clients.
const plans = join(dataDir, 'plans.json');
writeFileSync(plans, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
const t = await startTestApp({ dataDir, env: { UPSTREAM_LOCAL: node.url, UPSTREAM_LOCAL_WS: node.url.replace('http', 'ws'), PLANS_CONFIG: plans } });
const { app, runtime } = t;
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
const port = typeof address === 'object' && address ? address.port : 0;

const o = await owner(app);
await app.inject({ method: 'PUT', url: `/api/v1/admin/accounts/${o.accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan: 'unlimited' } });
const created = await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'bench' } });
const token = created.json().token as string;
await new Promise((r) => setTimeout(r, 500));

const mem = () => process.memoryUsage().rss;
global.gc?.();
const rssBefore = mem();
const sockets: WebSocket[] = [];
let received = 0;
let lastAt = 0;
for (let i = 0; i < clients; i++) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/local/${token}`, { perMessageDeflate: false });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  sockets.push(ws);
}
global.gc?.();
await new Promise((r) => setTimeout(r, 500));
const rssPerConnection = (mem() - rssBefore) / clients;

for (const ws of sockets) {
  ws.on('message', (data) => {
    if (data.toString().includes('"eth_subscription"')) {
      received++;
      lastAt = performance.now();
    }
  });
  ws.send('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}');
}
while ((runtime.telemetry.webSockets()?.subscriptions ?? 0) < clients) await new Promise((r) => setTimeout(r, 20));

const latencies: number[] = [];
const cpuBefore = process.cpuUsage();
for (let b = 0; b < blocks; b++) {
  const target = received + clients;
  const start = performance.now();
  await fetch(node.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}' });
  while (received < target) await new Promise((r) => setImmediate(r));
  latencies.push(lastAt - start);
}
const cpu = process.cpuUsage(cpuBefore);
latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((latencies.length * p) / 100))] ?? 0;
const result = {
  clients,
  blocks,
  upstreamSubscriptions: runtime.telemetry.webSockets()?.upstreamSubscriptions,
  lastClientMs: { p50: Math.round(pct(50) * 10) / 10, p99: Math.round(pct(99) * 10) / 10 },
  rssPerIdleConnectionKB: Math.round(rssPerConnection / 102.4) / 10,
  cpuMicrosPerNotification: Math.round(((cpu.user + cpu.system) / (blocks * clients)) * 10) / 10,
};
console.log(JSON.stringify(result));
for (const ws of sockets) ws.terminate();
await t.close();
await node.close();
