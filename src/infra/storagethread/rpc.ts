import type { MessagePort } from 'node:worker_threads';

/**
 * Calls between two threads over one MessagePort: request and answer, streams with credit (the
 * consumer asks for more, so a fast producer cannot flood the other thread's memory), and
 * one-way notices. Errors cross as plain fields and are turned back into the classes the ports
 * throw by the caller's `revive`, so code on the calling side sees what a local adapter throws.
 */

/** An error as it crosses the port: structured clone keeps neither a class nor its own fields. */
export interface WireError {
  name: string;
  message: string;
  fields: Record<string, unknown>;
}

type Request =
  | { t: 'call'; id: number; method: string; args: unknown[] }
  | { t: 'open'; id: number; method: string; args: unknown[]; credit: number }
  | { t: 'pull'; id: number; credit: number }
  | { t: 'cancel'; id: number }
  | { t: 'notice'; name: string; value: unknown };

type Reply =
  | { t: 'ok'; id: number; value: unknown }
  | { t: 'err'; id: number; error: WireError }
  | { t: 'item'; id: number; value: unknown }
  | { t: 'end'; id: number }
  | { t: 'notice'; name: string; value: unknown };

export function toWire(error: unknown): WireError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error), fields: {} };
  const fields: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(error)) {
    if (value === undefined || typeof value === 'function') continue;
    fields[key] = value;
  }
  return { name: error.name, message: error.message, fields };
}

/** A call's handlers on the serving side: answers for calls, async iterables for streams. */
export type Handlers = Record<string, (...args: never[]) => unknown>;
export type StreamHandlers = Record<string, (...args: never[]) => AsyncIterable<unknown> & { close(): Promise<void> }>;

/** Many items a stream may send before the consumer asks for more. */
const STREAM_CREDIT = 256;

/**
 * The serving side of a port: runs each call's handler and posts its answer; runs a stream's
 * iterable, posting items while it has credit.
 */
export class RpcServer {
  private readonly streams = new Map<number, { credit: number; wake: (() => void) | null; cancelled: boolean; close(): Promise<void> }>();

  constructor(
    private readonly port: MessagePort,
    private readonly handlers: Handlers,
    private readonly streamHandlers: StreamHandlers = {},
    private readonly onNotice: (name: string, value: unknown) => void = () => {},
  ) {
    port.on('message', (message: Request) => this.receive(message));
  }

  notify(name: string, value: unknown): void {
    this.post({ t: 'notice', name, value });
  }

  private post(reply: Reply): void {
    this.port.postMessage(reply);
  }

  private receive(message: Request): void {
    switch (message.t) {
      case 'call':
        void this.call(message.id, message.method, message.args);
        return;
      case 'open':
        void this.stream(message.id, message.method, message.args, message.credit);
        return;
      case 'pull': {
        const stream = this.streams.get(message.id);
        if (!stream) return;
        stream.credit += message.credit;
        stream.wake?.();
        return;
      }
      case 'cancel': {
        const stream = this.streams.get(message.id);
        if (!stream) return;
        stream.cancelled = true;
        stream.wake?.();
        void stream.close().catch(() => undefined);
        return;
      }
      case 'notice':
        this.onNotice(message.name, message.value);
        return;
    }
  }

  private async call(id: number, method: string, args: unknown[]): Promise<void> {
    const handler = this.handlers[method] as ((...a: unknown[]) => unknown) | undefined;
    try {
      if (!handler) throw new Error(`no method ${method} on this port`);
      this.post({ t: 'ok', id, value: await handler(...args) });
    } catch (error) {
      this.post({ t: 'err', id, error: toWire(error) });
    }
  }

  private async stream(id: number, method: string, args: unknown[], credit: number): Promise<void> {
    const handler = this.streamHandlers[method] as ((...a: unknown[]) => AsyncIterable<unknown> & { close(): Promise<void> }) | undefined;
    try {
      if (!handler) throw new Error(`no stream ${method} on this port`);
      const iterable = handler(...args);
      const state = { credit, wake: null as (() => void) | null, cancelled: false, close: () => iterable.close() };
      this.streams.set(id, state);
      for await (const item of iterable) {
        if (state.cancelled) break;
        this.post({ t: 'item', id, value: item });
        state.credit -= 1;
        while (state.credit <= 0 && !state.cancelled) await new Promise<void>((resolve) => (state.wake = resolve));
        state.wake = null;
        if (state.cancelled) break;
      }
      this.post({ t: 'end', id });
    } catch (error) {
      this.post({ t: 'err', id, error: toWire(error) });
    } finally {
      this.streams.delete(id);
    }
  }
}

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/** A stream's consumer end: items as they come, more asked for as they are taken. */
class RemoteStream<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private ended = false;
  private failure: Error | null = null;
  private waiting: (() => void) | null = null;
  private taken = 0;

  constructor(
    private readonly client: RpcClient,
    readonly id: number,
    /** Stops the stream on the other side too. */
    readonly close: () => void,
  ) {}

  push(item: T): void {
    this.items.push(item);
    this.wake();
  }

  end(error: Error | null): void {
    this.ended = true;
    this.failure = error;
    this.wake();
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      for (;;) {
        if (this.items.length > 0) {
          const item = this.items.shift() as T;
          this.taken += 1;
          // Half the credit used: ask for that much again, so items keep coming while these are handled.
          if (this.taken >= STREAM_CREDIT / 2) {
            this.client.pull(this.id, this.taken);
            this.taken = 0;
          }
          yield item;
          continue;
        }
        if (this.ended) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((resolve) => (this.waiting = resolve));
      }
    } finally {
      // A consumer that stopped early (break, an exception) stops the producer too.
      if (!this.ended) this.close();
    }
  }
}

/** The calling side of a port. Once the other thread is gone, every call in flight and every later one rejects with `gone`. */
export class RpcClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly streams = new Map<number, RemoteStream<unknown>>();
  private gone: Error | null = null;

  constructor(
    private readonly port: MessagePort,
    /** Turns an error that crossed the port back into the class the port's callers expect. */
    private readonly revive: (error: WireError) => Error,
    private readonly onNotice: (name: string, value: unknown) => void = () => {},
  ) {
    port.on('message', (message: Reply) => this.receive(message));
  }

  call<T>(method: string, ...args: unknown[]): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.port.postMessage({ t: 'call', id, method, args } satisfies Request);
    });
  }

  /** A stream of the other side's `method`; `close` stops it there too. */
  open<T>(method: string, ...args: unknown[]): AsyncIterable<T> & { close(): void } {
    const id = this.nextId++;
    const stream: RemoteStream<T> = new RemoteStream<T>(this, id, () => {
      if (!this.streams.delete(id)) return;
      stream.end(null);
      if (!this.gone) this.port.postMessage({ t: 'cancel', id } satisfies Request);
    });
    this.streams.set(id, stream as RemoteStream<unknown>);
    if (this.gone) stream.end(this.gone);
    else this.port.postMessage({ t: 'open', id, method, args, credit: STREAM_CREDIT } satisfies Request);
    return stream;
  }

  /** A message that needs no answer, in order with the calls. */
  notify(name: string, value: unknown): void {
    if (!this.gone) this.port.postMessage({ t: 'notice', name, value } satisfies Request);
  }

  pull(id: number, credit: number): void {
    if (!this.gone && this.streams.has(id)) this.port.postMessage({ t: 'pull', id, credit } satisfies Request);
  }

  /** The other side stopped: nothing in flight will be answered. */
  fail(error: Error): void {
    if (this.gone) return;
    this.gone = error;
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
    for (const s of this.streams.values()) s.end(error);
    this.streams.clear();
  }

  private receive(message: Reply): void {
    switch (message.t) {
      case 'ok':
      case 'err': {
        const p = this.pending.get(message.id);
        if (!p) {
          // A stream that failed on the other side.
          if (message.t === 'err') this.streams.get(message.id)?.end(this.revive(message.error));
          this.streams.delete(message.id);
          return;
        }
        this.pending.delete(message.id);
        if (message.t === 'ok') p.resolve(message.value);
        else p.reject(this.revive(message.error));
        return;
      }
      case 'item':
        this.streams.get(message.id)?.push(message.value);
        return;
      case 'end':
        this.streams.get(message.id)?.end(null);
        this.streams.delete(message.id);
        return;
      case 'notice':
        this.onNotice(message.name, message.value);
        return;
    }
  }
}
