import { EventEmitter } from 'node:events';
import type { ChangeFeed } from './port.js';

type Handler = (message: string) => void;

/**
 * In-process change feed. Delivery is asynchronous (next turn of the event loop), as it is over
 * Redis, so no caller comes to rely on a handler having run before `publish` returns.
 */
export class MemoryChangeFeed implements ChangeFeed {
  private readonly own = new Set<{ topic: string; listener: Handler }>();

  constructor(private readonly bus: EventEmitter = new EventEmitter().setMaxListeners(0)) {}

  async publish(topic: string, message: string): Promise<void> {
    setImmediate(() => this.bus.emit(topic, message));
  }

  async subscribe(topic: string, handler: Handler): Promise<() => Promise<void>> {
    const entry = { topic, listener: (message: string) => safely(handler, message) };
    this.bus.on(topic, entry.listener);
    this.own.add(entry);
    return async () => {
      this.bus.off(topic, entry.listener);
      this.own.delete(entry);
    };
  }

  async whenReady(): Promise<void> {}

  /** Removes this feed's subscriptions; the bus stays for the process's other roles. */
  async close(): Promise<void> {
    for (const { topic, listener } of this.own) this.bus.off(topic, listener);
    this.own.clear();
  }
}

/** A failing handler must not keep the others from hearing the message. */
export function safely(handler: Handler, message: string): void {
  try {
    handler(message);
  } catch {
    // The handler's own concern; the feed goes on.
  }
}
