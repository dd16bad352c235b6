import type { Decider } from '../domain/decider.js';
import { DomainError } from '../domain/errors.js';
import { decodeEvent, encodeEvent, type VersionedEvent } from '../domain/eventCodec.js';
import { type EventStore, type Position, type StoredEvent, WrongExpectedRevisionError } from '../infra/eventstore/port.js';

export interface Loaded<S> {
  state: S;
  /** Revision of the stream's last event; -1 when the stream is empty. */
  revision: number;
}

export interface Executed<S, E> {
  state: S;
  events: E[];
  /** Global position of the last appended event; null when nothing was appended. */
  position: Position | null;
}

const MAX_ATTEMPTS = 25;
const CACHED_STREAMS = 10_000;

interface CachedState {
  decider: unknown;
  state: unknown;
  revision: number;
}

/**
 * Loads aggregates from their streams and runs commands with optimistic concurrency: read,
 * fold, decide, append at the revision that was read; on a conflict, do it all again. `decode`
 * reads the stored events of the aggregates it serves (the domain's by default, or the alerts').
 */
export class AggregateStore {
  /**
   * The last state seen of recently used streams (states are immutable): a load reads only the
   * events after it. Other processes' appends are still read, since the read starts from the
   * cached revision; only the fold of what came before is saved. Least recently used first out.
   */
  private readonly cache = new Map<string, CachedState>();

  constructor(
    private readonly store: EventStore,
    private readonly decode: (stored: StoredEvent) => VersionedEvent | null = decodeEvent,
  ) {}

  async load<S, C, E extends VersionedEvent>(streamId: string, decider: Decider<S, C, E>): Promise<Loaded<S>> {
    const hit = this.cache.get(streamId);
    const cached = hit && hit.decider === decider ? (hit as CachedState & { state: S }) : null;
    let state = cached ? cached.state : decider.initialState();
    let revision = cached ? cached.revision : -1;
    for (const s of await this.store.readStream(streamId, { fromRevision: revision + 1 })) {
      const event = this.decode(s);
      if (event) state = decider.evolve(state, event as E);
      revision = s.revision;
    }
    this.remember(streamId, decider, state, revision);
    return { state, revision };
  }

  private remember(streamId: string, decider: unknown, state: unknown, revision: number): void {
    if (revision < 0) return;
    this.cache.delete(streamId);
    this.cache.set(streamId, { decider, state, revision });
    if (this.cache.size > CACHED_STREAMS) this.cache.delete(this.cache.keys().next().value as string);
  }

  /** `decideFn` sees the current state and returns the events (it may throw a DomainError). */
  async execute<S, C, E extends VersionedEvent>(streamId: string, decider: Decider<S, C, E>, decideFn: (state: S) => E[]): Promise<Executed<S, E>> {
    for (let attempt = 1; ; attempt++) {
      const { state, revision } = await this.load(streamId, decider);
      const events = decideFn(state);
      if (events.length === 0) return { state, events, position: null };
      try {
        const result = await this.store.append(
          streamId,
          events.map((e) => encodeEvent(e)),
          revision === -1 ? 'no_stream' : revision,
        );
        const next = events.reduce(decider.evolve, state);
        this.remember(streamId, decider, next, result.nextExpectedRevision);
        return { state: next, events, position: result.position };
      } catch (e) {
        if (!(e instanceof WrongExpectedRevisionError)) throw e;
        if (attempt >= MAX_ATTEMPTS) throw new DomainError('concurrency_conflict', 'Too many concurrent changes; try again.');
        await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
      }
    }
  }

  /** Each event with its time and the aggregate's state after it, for audit. */
  async history<S, C, E extends VersionedEvent>(
    streamId: string,
    decider: Decider<S, C, E>,
  ): Promise<Array<{ revision: number; position: Position; type: string; at: string; recordedAt: string; state: S }>> {
    let state = decider.initialState();
    const out = [];
    for (const stored of await this.store.readStream(streamId)) {
      const event = this.decode(stored);
      if (!event) continue;
      state = decider.evolve(state, event as E);
      out.push({
        revision: stored.revision,
        position: stored.position,
        type: event.type,
        at: String(event.data['at'] ?? stored.created),
        recordedAt: stored.created,
        state,
      });
    }
    return out;
  }

  async lastPosition(streamId: string): Promise<Position> {
    const events = await this.store.readStream(streamId);
    const last = events[events.length - 1];
    if (!last) throw new DomainError('not_found', `Stream ${streamId} is empty.`);
    return last.position;
  }

  /** Runs one command through the decider (the common case of `execute`). */
  run<S, C, E extends VersionedEvent>(streamId: string, decider: Decider<S, C, E>, command: C): Promise<Executed<S, E>> {
    return this.execute(streamId, decider, (state) => decider.decide(command, state));
  }
}

/** Decides several commands in a row on the evolving state: one append for all of them. */
export function decideAll<S, C, E>(decider: Decider<S, C, E>, commands: C[], state: S): E[] {
  const out: E[] = [];
  let current = state;
  for (const command of commands) {
    const events = decider.decide(command, current);
    current = events.reduce(decider.evolve, current);
    out.push(...events);
  }
  return out;
}
