/**
 * The gateway of bench/ws-fanout.ts, in a process of its own so that its RSS and CPU are its
 * own (/proc/<pid>): every role in one process with the embedded stores, the `local` chain on
 * the driver's fake node, one Unlimited token whose rate no fan-out reaches. Told by IPC.
 *   argv: <upstream http url> <upstream ws url>
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newToken, startTestApp } from '../test/support/testApp.js';

export type ToGateway = { type: 'gc' } | { type: 'stats' } | { type: 'stop' };
export type FromGateway =
  | { type: 'ready'; port: number; token: string }
  | { type: 'gc'; liveBytes: number }
  | { type: 'stats'; connections: number; subscriptions: number; upstreamSubscriptions: number };

const [httpUrl, wsUrl] = process.argv.slice(2) as [string, string];
const send = (m: FromGateway) => process.send?.(m);

const dataDir = mkdtempSync(join(tmpdir(), 'ws-bench-gateway-'));
const plans = join(dataDir, 'plans.json');
// Every notification is admitted and metered as a call: the token's rate must not refuse a head's fan-out.
writeFileSync(plans, JSON.stringify({ unlimited: { rps: 1_000_000_000 } }));
const t = await startTestApp({ dataDir, env: { UPSTREAM_LOCAL: httpUrl, UPSTREAM_LOCAL_WS: wsUrl, PLANS_CONFIG: plans } });
await t.app.listen({ port: 0, host: '127.0.0.1' });
const address = t.app.server.address();
const port = typeof address === 'object' && address ? address.port : 0;

// Resolves once the token reached the gateway's cache as an invalidation: before it, an upgrade could cache it as unknown.
const { token } = await newToken(t, { plan: 'unlimited', fields: { name: 'bench' } });

process.on('message', async (m: ToGateway) => {
  if (m.type === 'gc') {
    global.gc?.();
    const m = process.memoryUsage();
    send({ type: 'gc', liveBytes: m.heapUsed + m.external });
  } else if (m.type === 'stats') {
    const s = t.runtime.telemetry.webSockets();
    send({ type: 'stats', connections: s?.connections ?? 0, subscriptions: s?.subscriptions ?? 0, upstreamSubscriptions: s?.upstreamSubscriptions ?? 0 });
  } else {
    await t.close();
    rmSync(dataDir, { recursive: true, force: true });
    process.exit(0);
  }
});
send({ type: 'ready', port, token });
