import { MessageChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { EventStoreError } from '../../src/infra/eventstore/errors.js';
import { WrongExpectedRevisionError } from '../../src/infra/eventstore/port.js';
import { reviveStorageError } from '../../src/infra/storagethread/remote.js';
import { RpcClient, RpcServer } from '../../src/infra/storagethread/rpc.js';

/** The storage thread's calls over a real MessageChannel, both ends on this thread. */

const channels: MessageChannel[] = [];
afterEach(() => {
  for (const c of channels.splice(0)) {
    c.port1.close();
    c.port2.close();
  }
});

/** A producer of `count` numbers that records how far it has got and whether it was closed. */
function counter(count: number) {
  const state = { produced: 0, closed: false };
  const iterable = {
    async *[Symbol.asyncIterator]() {
      for (let i = 0; i < count && !state.closed; i++) {
        state.produced = i + 1;
        yield i;
      }
    },
    close: async () => {
      state.closed = true;
    },
  };
  return { state, iterable };
}

function connect(options: { stream?: ReturnType<typeof counter>; onNotice?: (name: string, value: unknown) => void } = {}) {
  const channel = new MessageChannel();
  channels.push(channel);
  const heard: Array<[string, unknown]> = [];
  const server = new RpcServer(
    channel.port2,
    {
      add: (a: number, b: number) => a + b,
      later: async (value: string) => value.toUpperCase(),
      conflict: () => {
        throw new WrongExpectedRevisionError('token-1', 3, 'no_stream');
      },
      closed: async () => {
        throw new EventStoreError('store_closed', 'the store is closed', { directory: '/data' });
      },
      plain: () => {
        throw new TypeError('bad');
      },
      heard: () => heard.map(([name]) => name),
    },
    { numbers: () => (options.stream ?? counter(0)).iterable },
    (name, value) => heard.push([name, value]),
  );
  const client = new RpcClient(channel.port1, reviveStorageError, options.onNotice);
  return { client, server, heard };
}

describe('storage thread calls', () => {
  it('answers calls with their values, sync or async', async () => {
    const { client } = connect();
    expect(await client.call('add', 2, 3)).toBe(5);
    expect(await client.call('later', 'abc')).toBe('ABC');
  });

  it('throws what the other side threw, as the same class with its fields', async () => {
    const { client } = connect();
    const conflict = await client.call('conflict').catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(WrongExpectedRevisionError);
    expect(conflict).toMatchObject({ streamId: 'token-1', expected: 3, actual: 'no_stream' });
    const closed = await client.call('closed').catch((e: unknown) => e);
    expect(closed).toBeInstanceOf(EventStoreError);
    expect(closed).toMatchObject({ code: 'store_closed', message: 'the store is closed', details: { directory: '/data' } });
    const plain = await client.call('plain').catch((e: unknown) => e);
    expect(plain).toMatchObject({ name: 'TypeError', message: 'bad' });
    await expect(client.call('nothing')).rejects.toThrow('no method nothing');
  });

  it('streams every item in order, never more than its credit ahead of the consumer', async () => {
    const stream = counter(2_000);
    const { client } = connect({ stream });
    const got: number[] = [];
    let furthestAhead = 0;
    for await (const n of client.open<number>('numbers')) {
      got.push(n);
      furthestAhead = Math.max(furthestAhead, stream.state.produced - got.length);
      // A slow consumer: the producer must wait for it rather than fill the port.
      if (n % 100 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    expect(got).toEqual(Array.from({ length: 2_000 }, (_, i) => i));
    expect(furthestAhead).toBeGreaterThan(0);
    expect(furthestAhead).toBeLessThanOrEqual(256);
  });

  it('stops the producer when the consumer closes its stream', async () => {
    const stream = counter(1_000_000);
    const { client } = connect({ stream });
    const numbers = client.open<number>('numbers');
    let seen = 0;
    for await (const _ of numbers) {
      if (++seen === 10) numbers.close();
    }
    await new Promise((r) => setTimeout(r, 20));
    expect(stream.state.closed).toBe(true);
    expect(stream.state.produced).toBeLessThan(1_000);
  });

  it('stops the producer when the consumer leaves its loop early', async () => {
    const stream = counter(1_000_000);
    const { client } = connect({ stream });
    let seen = 0;
    for await (const _ of client.open<number>('numbers')) {
      if (++seen === 10) break;
    }
    await new Promise((r) => setTimeout(r, 20));
    expect(stream.state.closed).toBe(true);
    expect(stream.state.produced).toBeLessThan(1_000);
  });

  it('carries notices both ways, in order with the calls', async () => {
    const notices: Array<[string, unknown]> = [];
    const { client, server } = connect({ onNotice: (name, value) => notices.push([name, value]) });
    client.notify('first', [1, 2]);
    client.notify('second', null);
    expect(await client.call('heard')).toEqual(['first', 'second']);
    server.notify('back', { ok: true });
    await new Promise((r) => setTimeout(r, 10));
    expect(notices).toEqual([['back', { ok: true }]]);
  });

  it('once the other side is gone, rejects what is in flight and every later call, and ends its streams', async () => {
    const channel = new MessageChannel();
    channels.push(channel);
    // The other side never answers this call, nor sends a stream's items.
    new RpcServer(channel.port2, { hang: () => new Promise(() => {}) }, { numbers: () => counter(0).iterable });
    const client = new RpcClient(channel.port1, reviveStorageError);
    const inFlight = client.call('hang');
    const stream = client.open<number>('numbers');
    const gone = new Error('storage thread stopped (exit code 1)');
    client.fail(gone);
    await expect(inFlight).rejects.toBe(gone);
    await expect(client.call('hang')).rejects.toBe(gone);
    const drain = async (): Promise<void> => {
      for await (const _ of stream) void _;
    };
    await expect(drain()).rejects.toBe(gone);
  });
});
