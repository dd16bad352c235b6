import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { type Devnet, startDevnetPreferring } from '../../src/infra/devnet.js';

const freePort = (): Promise<number> =>
  new Promise((resolve) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });

const chainIdOf = async (devnet: Devnet): Promise<unknown> => {
  const res = await fetch(devnet.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}',
  });
  return ((await res.json()) as { result?: unknown }).result;
};

describe('the devnet of the local chain', () => {
  it('several starting at about the same moment on one preferred port all run: one on it, the others elsewhere', async () => {
    const port = await freePort();
    // Staggered a little, as processes started together are: each finds the port free before any devnet listens on it.
    const starting = [0, 10, 20].map((ms) => new Promise<void>((r) => setTimeout(r, ms)).then(() => startDevnetPreferring(port)));
    const devnets = (await Promise.allSettled(starting)).flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    try {
      expect(devnets.length).toBe(3);
      const ports = devnets.map((d) => Number(new URL(d.url).port));
      expect(ports).toContain(port);
      expect(new Set(ports).size).toBe(3);
      expect(await Promise.all(devnets.map(chainIdOf))).toEqual(['0x539', '0x539', '0x539']);
    } finally {
      await Promise.all(devnets.map((d) => d.close()));
    }
  }, 60_000);
});
