import {
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type EventStoreDBClient,
  excludeSystemEvents,
  START,
  streamNameFilter,
} from '@eventstore/db-client';
import { streamMatcher } from './appendRules.js';
import { AsyncQueue } from './asyncQueue.js';
import { EventStoreError } from './errors.js';
import { formatEsdbPosition, isSystemEvent, parseEsdbPosition, toStoredEvent } from './esdbEvents.js';
import type { Position, SubscribeOptions, Subscription, SubscriptionItem } from './port.js';

/** Items held for a slow consumer before the gRPC stream is paused. */
const HIGH_WATER = 1000;

/**
 * A catch-up subscription to `$all` on EventStoreDB. The server says when it has caught up
 * (EventStoreDB 23.10+ / KurrentDB); the client emits that as a `caughtUp` event beside the
 * data, so the marker is queued after the events the stream had already buffered by then.
 */
export class EsdbSubscription implements Subscription {
  private readonly queue: AsyncQueue<SubscriptionItem>;
  private readonly stream: AllStreamSubscription;
  private readonly matches: (streamId: string) => boolean;
  /** Position of the last event seen (delivered or not); nothing at or before it is delivered. */
  private lastSeen: Position | undefined;
  /** Data events still to come before the caught-up marker, once the server said so. */
  private markerDueAfter: number | undefined;
  private caughtUpSent = false;
  private closed = false;
  private started = false;

  constructor(
    client: EventStoreDBClient,
    options: SubscribeOptions,
    private readonly onClose: (subscription: EsdbSubscription) => void,
  ) {
    const prefixes = options.streamPrefixes ?? [];
    this.matches = streamMatcher(prefixes);
    this.lastSeen = options.after;
    this.queue = new AsyncQueue<SubscriptionItem>(
      HIGH_WATER,
      () => this.stream.pause(),
      () => this.stream.resume(),
    );
    this.stream = client.subscribeToAll({
      // Exclusive: the server starts after this position (and `lastSeen` guards it anyway).
      fromPosition: options.after === undefined ? START : parseEsdbPosition(options.after),
      filter: prefixes.length > 0 ? streamNameFilter({ prefixes }) : excludeSystemEvents(),
    });
    this.stream.on('data', (resolved: AllStreamResolvedEvent) => this.onData(resolved));
    this.stream.on('caughtUp', () => this.onCaughtUp());
    this.stream.on('error', (error: Error) => this.queue.fail(error));
    this.stream.on('end', () => this.queue.end());
  }

  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    if (this.started) throw new EventStoreError('subscription_in_use', 'a subscription can be iterated only once');
    this.started = true;
    return {
      next: () => this.queue.next(),
      return: async () => {
        await this.close();
        return { value: undefined, done: true };
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.queue.end({ discard: true });
    this.onClose(this);
    await this.stream.unsubscribe();
  }

  private onData(resolved: AllStreamResolvedEvent): void {
    const event = resolved.event;
    if (event) {
      const position = formatEsdbPosition(event.position);
      if (this.lastSeen === undefined || position > this.lastSeen) {
        this.lastSeen = position;
        if (!isSystemEvent(event) && this.matches(event.streamId)) {
          try {
            this.queue.push({ kind: 'event', event: toStoredEvent(event) });
          } catch (error) {
            this.queue.fail(error);
          }
        }
      }
    }
    if (this.markerDueAfter !== undefined) {
      this.markerDueAfter -= 1;
      if (this.markerDueAfter <= 0) this.sendCaughtUp();
    }
  }

  private onCaughtUp(): void {
    if (this.caughtUpSent || this.markerDueAfter !== undefined) return;
    // Events the stream holds but has not emitted yet came before the server's marker.
    const buffered = this.stream.readableLength;
    if (buffered === 0) this.sendCaughtUp();
    else this.markerDueAfter = buffered;
  }

  private sendCaughtUp(): void {
    this.markerDueAfter = undefined;
    this.caughtUpSent = true;
    this.queue.push({ kind: 'caughtUp', position: this.lastSeen ?? null });
  }
}
