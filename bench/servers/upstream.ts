/**
 * The upstream every gateway benchmark forwards to: answers any request at once with a fixed
 * JSON-RPC eth_blockNumber result, so what is measured is the proxy in front of it.
 *
 *   node dist/bench-build/bench/servers/upstream.js <port>   (compiled by bench/lib/services.ts)
 */
import { createServer } from 'node:http';

export const UPSTREAM_ANSWER = '{"jsonrpc":"2.0","id":1,"result":"0x134e82a"}';

const port = Number(process.argv[2] ?? 0);
const answer = Buffer.from(UPSTREAM_ANSWER);
const server = createServer((req, res) => {
  // Read the request to its end before answering, as a node does.
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length });
    res.end(answer);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
