import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { openRuntime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { ADMIN_TOKEN, startTestApp } from '../support/testApp.js';

/**
 * Slow clients are cut off: a client that sends its headers, or its whole request, too slowly is
 * answered 408 and its connection closed; an idle keep-alive connection is closed. Both shapes of
 * the HTTP server get it: the node:http front of a process serving chain calls (ROLE=all,
 * gateway) and fastify's own server (ROLE=api).
 */

const SHORT = { HEADERS_TIMEOUT_MS: '1000', REQUEST_TIMEOUT_MS: '2000', KEEP_ALIVE_TIMEOUT_MS: '500' };
/** Far beyond the timeouts above: the server must close before the client is done. */
const BYTE_EVERY_MS = 200;

interface Shape {
  name: string;
  start(): Promise<{ app: FastifyInstance; close(): Promise<void> }>;
  /** A request a slow client sends the body of, and that body. */
  post: { path: string; body: string };
}

const SHAPES: Shape[] = [
  {
    name: 'ROLE=all (the chain front)',
    async start() {
      const t = await startTestApp({ env: SHORT });
      return { app: t.app, close: () => t.close() };
    },
    // A known chain's call: the front reads its body itself.
    post: { path: '/eth', body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' },
  },
  {
    name: "ROLE=api (fastify's own server)",
    async start() {
      // ROLE=api proper needs EventStoreDB and MongoDB, which these machines lack: the embedded
      // stores under the api role build the same server (no gateway, so no front).
      const dataDir = mkdtempSync(join(tmpdir(), 'gw-timeouts-'));
      const config = loadConfig({ DATA_DIR: dataDir, ADMIN_TOKEN, LOCAL_DEVNET: 'off', ...SHORT });
      const runtime = await openRuntime({ ...config, role: 'api' });
      const app = await buildServer(runtime);
      return {
        app,
        async close() {
          await app.close();
          await runtime.close();
          rmSync(dataDir, { recursive: true, force: true });
        },
      };
    },
    post: { path: '/api/v1/auth/signup', body: '{"email":"slow@example.com","password":"correct horse battery"}' },
  },
];

interface Trickled {
  /** What the server wrote back. */
  answer: string;
  /** Whether the server closed the connection before the client had sent everything. */
  cutOff: boolean;
}

/** Sends `lead` at once, then `text` one byte at a time for as long as the server keeps the connection. */
function trickle(port: number, lead: string, text: string): Promise<Trickled> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    let sent = 0;
    let timer: NodeJS.Timeout | undefined;
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      answer += chunk;
    });
    socket.on('error', () => undefined); // a reset or a write after the server closed: the close says it
    socket.once('connect', () => {
      socket.write(lead);
      timer = setInterval(() => {
        if (sent < text.length) {
          socket.write(text.charAt(sent++));
          return;
        }
        // Everything sent and the connection still open: the server waited for all of it.
        clearInterval(timer);
        socket.destroy();
        resolve({ answer, cutOff: false });
      }, BYTE_EVERY_MS);
    });
    socket.once('close', () => {
      clearInterval(timer);
      resolve({ answer, cutOff: sent < text.length });
    });
  });
}

for (const shape of SHAPES)
  describe(`${shape.name} with short timeouts`, () => {
    let server: Awaited<ReturnType<Shape['start']>>;
    let port: number;
    beforeAll(async () => {
      server = await shape.start();
      await server.app.listen({ port: 0, host: '127.0.0.1' });
      port = (server.app.server.address() as AddressInfo).port;
    });
    afterAll(async () => {
      await server?.close();
    });

    it('answers 408 and closes a connection whose headers come a byte at a time', { timeout: 20_000 }, async () => {
      const slow = await trickle(port, '', 'GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow-client\r\n');
      expect(slow.cutOff).toBe(true);
      expect(slow.answer).toMatch(/^HTTP\/1\.1 408 /);
    });

    it('answers 408 and closes a connection whose body comes a byte at a time', { timeout: 20_000 }, async () => {
      const { path, body } = shape.post;
      const head = `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
      const slow = await trickle(port, head, body);
      expect(slow.cutOff).toBe(true);
      expect(slow.answer).toMatch(/^HTTP\/1\.1 408 /);
    });

    it('closes a keep-alive connection left idle after its answer', { timeout: 20_000 }, async () => {
      const socket = connect(port, '127.0.0.1');
      let answer = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        answer += chunk;
      });
      socket.on('error', () => undefined);
      const closed = new Promise<boolean>((resolve) => {
        socket.once('close', () => resolve(true));
        // Node closes it a second after the keep-alive timeout (a margin for clients that honour its
        // Keep-Alive header): 5 s is far beyond.
        setTimeout(() => resolve(false), 5_000).unref();
      });
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      const closedByServer = await closed;
      socket.destroy();
      expect(answer).toMatch(/^HTTP\/1\.1 200 [\s\S]*\r\n\r\n\{"status":"ok"\}$/);
      expect(answer).toMatch(/\r\nConnection: keep-alive\r\n/i);
      expect(closedByServer).toBe(true);
    });
  });

describe('the timeouts settings', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-timeouts-config-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
  const load = (env: Record<string, string>) => loadConfig({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off', ...env });

  it('default to 10 s for the headers, 30 s for the whole request and 72 s for an idle keep-alive connection', () => {
    expect(load({}).http).toEqual({ headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 72_000 });
  });

  it.each([
    ['HEADERS_TIMEOUT_MS', { HEADERS_TIMEOUT_MS: 'soon' }],
    ['REQUEST_TIMEOUT_MS', { REQUEST_TIMEOUT_MS: '0' }],
    ['KEEP_ALIVE_TIMEOUT_MS', { KEEP_ALIVE_TIMEOUT_MS: '-1' }],
    ['HEADERS_TIMEOUT_MS .* REQUEST_TIMEOUT_MS', { HEADERS_TIMEOUT_MS: '40000' }],
  ])('refuses a bad value, naming %s', (name, env) => {
    expect(() => load(env)).toThrow(ConfigError);
    expect(() => load(env)).toThrow(new RegExp(name));
  });
});
