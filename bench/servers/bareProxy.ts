/**
 * The baseline the gateway's throughput is held against: a bare Node pass-through proxy on the
 * same HTTP stack (node:http in, an undici Pool out, keep-alive, no pipelining), without auth,
 * limits or metering.
 *
 *   node dist/bench-build/bench/servers/bareProxy.js <port> <upstream-url> [with-gateway-headers]   (compiled by bench/lib/services.ts)
 *
 * `with-gateway-headers`: each answer also carries the seven headers the gateway adds (a request
 * id and the six limit headers), built per call: what writing them costs Node alone.
 */
import { createServer } from 'node:http';
import { Pool } from 'undici';

const [port, upstream] = [Number(process.argv[2] ?? 0), process.argv[3] ?? 'http://127.0.0.1:8545'];
const pool = new Pool(upstream, { connections: 64, pipelining: 1 });
const withGatewayHeaders = process.argv[4] === 'with-gateway-headers';
let served = 0;
const server = createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  try {
    const answer = await pool.request({ method: 'POST', path: '/', headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks) });
    const body = Buffer.from(await answer.body.arrayBuffer());
    if (withGatewayHeaders) {
      // One literal, in the gateway's order: spreading a fresh object into another with more
      // properties (`{ ...headers(), 'content-type': … }`) takes V8's slow path and measured
      // ~13 µs a request here, five times what the headers cost (docs/decisions.md).
      served += 1;
      res.writeHead(answer.statusCode, {
        'x-request-id': `bare-${served}`,
        'x-ratelimit-limit': '1000000',
        'x-ratelimit-remaining': String(999_999 - (served % 1000)),
        'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 1),
        'x-monthlylimit-limit': 'unlimited',
        'x-monthlylimit-remaining': 'unlimited',
        'x-monthlylimit-reset': '1796083200',
        'content-type': 'application/json',
        'content-length': body.length,
      });
    } else {
      res.writeHead(answer.statusCode, { 'content-type': 'application/json', 'content-length': body.length });
    }
    res.end(body);
  } catch {
    res.writeHead(502).end();
  }
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => server.close(() => void pool.close().then(() => process.exit(0))));
