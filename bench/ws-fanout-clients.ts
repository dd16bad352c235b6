/**
 * Clients of bench/ws-fanout.ts, in a process apart from the gateway (each WebSocket is one
 * descriptor here and one there: 10,000 clients in the gateway's process would pass the 20,000
 * open-file limit). Told by IPC: open N sockets, subscribe each to newHeads, report when every
 * one of them has a block's head (the last one's time), close; or load the gateway with
 * request/response calls over WebSocket or HTTP keep-alive.
 *   argv: <gateway ws url, with token> <clients>
 */
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';

export type ToClients =
  | { type: 'subscribe' }
  | { type: 'close' }
  | { type: 'load'; transport: 'ws' | 'http'; url: string; connections: number; seconds: number; body: string };
export type FromClients =
  | { type: 'opened' }
  | { type: 'subscribed' }
  | { type: 'block'; number: number; lastAt: number }
  | { type: 'closed' }
  | { type: 'load'; calls: number; errors: number };

const [url, countText] = process.argv.slice(2) as [string, string];
const count = Number(countText);
const send = (m: FromClients) => process.send?.(m);
/** performance.now() on the machine's clock, comparable across processes (the driver stamps the node's send with it). */
const now = () => performance.timeOrigin + performance.now();

const sockets: WebSocket[] = [];
/** Per block number: clients that have its head. */
const heads = new Map<number, number>();
let answered = 0;

function open(): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

// A few hundred upgrades at a time: the gateway's accept backlog is 511.
for (let i = 0; i < count; i += 200) {
  sockets.push(...(await Promise.all(Array.from({ length: Math.min(200, count - i) }, open))));
}
for (const ws of sockets) {
  ws.on('message', (data: Buffer) => {
    const at = data.indexOf('"number":"0x');
    if (at < 0 || data.indexOf('"eth_subscription"') < 0) {
      if (++answered === count) send({ type: 'subscribed' });
      return;
    }
    const start = at + '"number":"'.length;
    const number = Number.parseInt(data.toString('latin1', start, data.indexOf('"', start)), 16);
    const seen = (heads.get(number) ?? 0) + 1;
    heads.set(number, seen);
    if (seen === count) {
      send({ type: 'block', number, lastAt: now() });
      heads.delete(number);
    }
  });
}
send({ type: 'opened' });

process.on('message', async (m: ToClients) => {
  if (m.type === 'subscribe') {
    for (const ws of sockets) ws.send('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}');
  } else if (m.type === 'close') {
    await Promise.all(
      sockets.map(
        (ws) =>
          new Promise((resolve) => {
            ws.once('close', resolve);
            ws.close();
          }),
      ),
    );
    sockets.length = 0;
    send({ type: 'closed' });
  } else {
    send({
      type: 'load',
      ...(m.transport === 'ws' ? await loadWs(m.url, m.connections, m.seconds, m.body) : await loadHttp(m.url, m.connections, m.seconds, m.body)),
    });
  }
});

/** `connections` sockets, each sending its next call when the last one is answered, for `seconds`. */
async function loadWs(target: string, connections: number, seconds: number, body: string): Promise<{ calls: number; errors: number }> {
  let calls = 0;
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      const ws = await new Promise<WebSocket>((resolve, reject) => {
        const s = new WebSocket(target, { perMessageDeflate: false });
        s.once('open', () => resolve(s));
        s.once('error', reject);
      });
      await new Promise<void>((resolve) => {
        ws.on('message', (data: Buffer) => {
          calls++;
          if (data.indexOf('"error"') >= 0) errors++;
          if (performance.now() < until) ws.send(body);
          else resolve();
        });
        ws.send(body);
      });
      ws.close();
    }),
  );
  return { calls, errors };
}

/** `connections` keep-alive HTTP connections, each sending its next POST when the last one is answered, for `seconds`. */
async function loadHttp(target: string, connections: number, seconds: number, body: string): Promise<{ calls: number; errors: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  let calls = 0;
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        target,
        { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            calls++;
            if (res.statusCode !== 200 || Buffer.concat(chunks).indexOf('"error"') >= 0) errors++;
            resolve();
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < until) await post();
    }),
  );
  agent.destroy();
  return { calls, errors };
}
