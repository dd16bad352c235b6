/**
 * The `local` chain's node on the embedded default: an in-process ganache EVM devnet on
 * loopback, so the README's first call works with no internet. Loaded only when used.
 */
export interface Devnet {
  url: string;
  close(): Promise<void>;
}

interface GanacheServer {
  listen(port: number, host: string): Promise<void>;
  close(): Promise<void>;
  address(): { port: number };
}

export async function startDevnet(options: { port?: number; chainId?: number } = {}): Promise<Devnet> {
  const ganache = (await import('ganache')).default as unknown as { server(options: unknown): GanacheServer };
  const server = ganache.server({
    logging: { quiet: true },
    wallet: { deterministic: true },
    chain: { chainId: options.chainId ?? 1337 },
  });
  await server.listen(options.port ?? 0, '127.0.0.1');
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

/**
 * A devnet on `port`, or on any free port when it is taken (another gateway's devnet, or one
 * starting at this very moment). The port is asked for, not probed first: two processes that
 * both probed it free would both try it, and one would die with EADDRINUSE.
 */
export async function startDevnetPreferring(port: number, options: { chainId?: number } = {}): Promise<Devnet> {
  try {
    return await startDevnet({ ...options, port });
  } catch (e) {
    if ((e as { code?: unknown }).code !== 'EADDRINUSE') throw e;
    return startDevnet({ ...options, port: 0 });
  }
}
