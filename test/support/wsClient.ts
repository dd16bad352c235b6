import WebSocket, { type ClientOptions } from 'ws';
import { until } from './eventually.js';

/** A WebSocket JSON-RPC client that keeps every frame it receives and how it closed. */
export class WsClient {
  readonly frames: Array<Record<string, unknown>> = [];
  closed: { code: number; reason: string } | null = null;
  private nextId = 1;
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => this.frames.push(JSON.parse(data.toString()) as Record<string, unknown>));
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
    });
  }

  static open(url: string, options: ClientOptions = {}): Promise<WsClient> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, options);
      ws.once('open', () => resolve(new WsClient(ws)));
      ws.once('error', reject);
    });
  }

  /** Sends a call without waiting: its id. */
  send(method: string, params: unknown[] = []): number {
    const id = this.nextId++;
    this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    return id;
  }

  async call(method: string, params: unknown[] = []): Promise<Record<string, unknown>> {
    return this.answer(this.send(method, params));
  }

  async answer(id: unknown, timeoutMs = 5000): Promise<Record<string, unknown>> {
    await until(() => this.frames.some((f) => f.id === id) || this.closed !== null, timeoutMs);
    const found = this.frames.find((f) => f.id === id);
    if (!found) throw new Error(`closed before answering: ${JSON.stringify(this.closed)}`);
    return found;
  }

  /** The params of each notification for a subscription: `result`, or `error` for the last one. */
  notifications(subscription: unknown): Array<Record<string, unknown>> {
    return this.frames
      .filter((f) => f.method === 'eth_subscription' && (f.params as { subscription?: unknown }).subscription === subscription)
      .map((f) => f.params as Record<string, unknown>);
  }

  async whenClosed(timeoutMs = 5000): Promise<{ code: number; reason: string }> {
    await until(() => this.closed !== null, timeoutMs);
    return this.closed as { code: number; reason: string };
  }

  close(): void {
    this.ws.close();
  }
}

/** An upgrade to `url` the server refused: its HTTP status and body (rejects if it was accepted). */
export function refusedUpgrade(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once('open', () => reject(new Error('the upgrade was accepted')));
    ws.once('error', () => undefined);
  });
}
