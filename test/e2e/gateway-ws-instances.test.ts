import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The plan's `ws_connections` cap across gateway instances sharing one Redis: instance A in this
 * process (the whole service), instance B a gateway process of its own (ROLE=gateway) on the
 * same PostgreSQL and Redis; a Free token (2 connections).
 */
const TTL_MS = 3000;
const unavailable = await postgresUnavailable();

/** An upgrade: the open socket, or the refusal's HTTP status and body. */
type Attempt = { open: true; ws: WebSocket } | { open: false; status: number; body: string };

function attempt(url: string): Promise<Attempt> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve({ open: true, ws }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      res.on('end', () => resolve({ open: false, status: res.statusCode ?? 0, body }));
    });
    ws.once('error', (error) => reject(error));
  });
}

async function opened(url: string): Promise<WebSocket> {
  const a = await attempt(url);
  if (!a.open) throw new Error(`refused: ${a.status} ${a.body}`);
  return a.ws;
}

function closed(ws: WebSocket): Promise<number> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve(-1);
  return new Promise((resolve) => ws.once('close', (code) => resolve(code)));
}

/** Tries every 50 ms until an upgrade is accepted: the socket and how long it took. */
async function firstAccepted(url: string, timeoutMs: number): Promise<{ ws: WebSocket; afterMs: number }> {
  const started = Date.now();
  for (;;) {
    const a = await attempt(url);
    if (a.open) return { ws: a.ws, afterMs: Date.now() - started };
    if (Date.now() - started > timeoutMs) throw new Error(`still refused after ${timeoutMs} ms: ${a.status} ${a.body}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.skipIf(unavailable !== null)(
  unavailable ? `WebSocket connection caps across instances (skipped: ${unavailable})` : 'WebSocket connection caps across instances',
  () => {
    let db: TestDatabase;
    let redis: TestRedisServer;
    let ganache: GanacheNode;
    let a: TestApp;
    let b: ServiceProcess;
    let onA: string;
    let onB: string;
    const sockets: WebSocket[] = [];

    beforeAll(async () => {
      [db, redis, ganache] = await Promise.all([createTestDatabase(), startTestRedisServer(), startGanache()]);
      const env = { DATABASE_URL: db.url, REDIS_URL: redis.url, UPSTREAM_LOCAL: ganache.url, WS_INSTANCE_TTL_MS: String(TTL_MS) };
      b = startService({ ...env, ROLE: 'gateway', LOCAL_DEVNET: 'off', LOG_LEVEL: 'warn' });
      a = await startTestApp({ env });
      await a.app.listen({ port: 0, host: '127.0.0.1' });
      const address = a.app.server.address();
      onA = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
      onB = (await b.ready).replace('http', 'ws');
    }, 120_000);
    afterAll(async () => {
      for (const ws of sockets) ws.terminate();
      b?.child.kill('SIGKILL');
      await b?.exited;
      await a?.close();
      await ganache?.close();
      await redis?.stop();
      await db?.drop();
    });

    it('holds the Free cap of 2 across two instances: a third socket on B is refused 429 (-32005); one closed on A lets B in', async () => {
      const { token } = await newToken(a, { plan: 'free' });
      const first = await opened(`${onA}/local/${token}`);
      const second = await opened(`${onA}/local/${token}`);
      sockets.push(first, second);

      const refused = await attempt(`${onB}/local/${token}`);
      expect(refused).toMatchObject({ open: false, status: 429 });
      expect(refused.open === false && JSON.parse(refused.body)).toMatchObject({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32005, message: 'Too many WebSocket connections for this token: at most 2 at once' },
      });
      // A refuses a third of its own as well.
      expect(await attempt(`${onA}/local/${token}`)).toMatchObject({ open: false, status: 429 });

      first.close();
      await closed(first);
      const { ws: third } = await firstAccepted(`${onB}/local/${token}`, 5000);
      sockets.push(third);
      expect(await attempt(`${onA}/local/${token}`)).toMatchObject({ open: false, status: 429 });
      second.close();
      third.close();
      await Promise.all([closed(second), closed(third)]);
    });

    it(`frees a killed instance's connections within its TTL (${TTL_MS} ms), not before`, async () => {
      const { token } = await newToken(a, { plan: 'free' });
      const held = [await opened(`${onB}/local/${token}`), await opened(`${onB}/local/${token}`)];
      sockets.push(...held);
      expect(await attempt(`${onA}/local/${token}`)).toMatchObject({ open: false, status: 429 });

      // SIGKILL: no release, no goodbye; only the TTL frees what B held.
      b.child.kill('SIGKILL');
      await b.exited;
      const killedAt = Date.now();
      await Promise.all(held.map(closed));
      expect(await attempt(`${onA}/local/${token}`), 'still counted right after the kill').toMatchObject({ open: false, status: 429 });

      const { ws, afterMs } = await firstAccepted(`${onA}/local/${token}`, TTL_MS + 3000);
      sockets.push(ws);
      expect(Date.now() - killedAt).toBeLessThan(TTL_MS + 1000);
      expect(afterMs).toBeGreaterThan(0);
      // The second slot is free too; the cap still holds on what A now counts.
      sockets.push(await opened(`${onA}/local/${token}`));
      expect(await attempt(`${onA}/local/${token}`)).toMatchObject({ open: false, status: 429 });
    });
  },
);
