import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { freePort, waitForPort } from '../support/redisServer.js';

/**
 * docs/nginx.compose.conf is the compose file's front door. WebSockets share the chain paths
 * (README: ws://HOST:PORT/<chain>/<token>), so the proxy must pass the upgrade on: it set
 * `Connection ""` for keep-alive to the upstreams, which dropped it, and every WebSocket client
 * got 400 from the gateway (found putting nginx with this file in front of two gateway roles).
 * Run against a real nginx when one is on the PATH (Debian's `nginx`).
 */
const CONF = readFileSync(join(import.meta.dirname, '../../docs/nginx.compose.conf'), 'utf8');

function nginxOnPath(): string | null {
  try {
    execFileSync('nginx', ['-v'], { stdio: 'ignore' });
    return null;
  } catch {
    return 'nginx is not on the PATH';
  }
}
const unavailable = nginxOnPath();

const listening = (server: Server): Promise<number> =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));

describe.skipIf(unavailable !== null)(
  unavailable ? `docs/nginx.compose.conf (skipped: ${unavailable})` : 'docs/nginx.compose.conf in front of a gateway',
  () => {
    let dir: string;
    let gateway: Server;
    let api: Server;
    let nginx: ChildProcess;
    let port: number;

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'gw-nginx-'));
      // A gateway that answers chain POSTs and echoes WebSocket frames; an API that answers its paths.
      gateway = createServer((req, res) => res.end(`gateway ${req.method} ${req.url}`));
      const sockets = new WebSocketServer({ server: gateway });
      sockets.on('connection', (socket, req) => socket.on('message', (data) => socket.send(`${req.url} ${String(data)}`)));
      api = createServer((req, res) => res.end(`api ${req.url}`));
      const [gatewayPort, apiPort] = [await listening(gateway), await listening(api)];
      port = await freePort();
      const site = CONF.replace('server gateway:8080;', `server 127.0.0.1:${gatewayPort};`)
        .replace('server api:8080;', `server 127.0.0.1:${apiPort};`)
        .replace('listen 8080;', `listen 127.0.0.1:${port};`);
      expect(site).not.toMatch(/gateway:8080|api:8080|listen 8080;/);
      writeFileSync(join(dir, 'site.conf'), site);
      const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((name) => `${name}_temp_path ${join(dir, name)};`).join(' ');
      writeFileSync(
        join(dir, 'nginx.conf'),
        `daemon off; pid ${join(dir, 'nginx.pid')}; error_log ${join(dir, 'error.log')};
       events { worker_connections 64; }
       http { access_log off; ${temp} include ${join(dir, 'site.conf')}; }`,
      );
      nginx = spawn('nginx', ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
      await waitForPort(port, true);
    });

    afterAll(async () => {
      if (nginx && nginx.exitCode === null) {
        const exited = new Promise((resolve) => nginx.once('exit', resolve));
        nginx.kill('SIGTERM');
        await exited;
      }
      await Promise.all([gateway, api].filter(Boolean).map((server) => new Promise((resolve) => server.close(resolve))));
      rmSync(dir, { recursive: true, force: true });
    });

    it('routes chain calls to the gateways and the dashboard and API to api', async () => {
      const call = await fetch(`http://127.0.0.1:${port}/local/gk_token`, { method: 'POST', body: '{}' });
      expect(await call.text()).toBe('gateway POST /local/gk_token');
      expect(await (await fetch(`http://127.0.0.1:${port}/api/v1/account`)).text()).toBe('api /api/v1/account');
      expect(await (await fetch(`http://127.0.0.1:${port}/`)).text()).toBe('api /');
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(404);
    });

    it('passes a WebSocket upgrade on a chain path to the gateways', async () => {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/local/gk_token`);
      try {
        const echoed = await new Promise<string>((resolve, reject) => {
          socket.once('open', () => socket.send('{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'));
          socket.once('message', (data) => resolve(String(data)));
          socket.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
          socket.once('error', reject);
        });
        expect(echoed).toBe('/local/gk_token {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}');
      } finally {
        socket.terminate();
      }
    });
  },
);
