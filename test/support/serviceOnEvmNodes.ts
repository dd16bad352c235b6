import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from './eventually.js';
import { type EvmNodeFake, FakeEvmChain, startEvmNodeFake } from './fakeUpstreams.js';
import { listen, newToken, startTestApp, type TestApp } from './testApp.js';

/** The whole service in front of fake EVM nodes serving one moving chain, and an Unlimited token's URL on it. */
export interface ServiceOnEvmNodes {
  t: TestApp;
  /** `<base>/evm/<token>`. */
  url: string;
  accountId: string;
  /** The account owner's API authorization header (the account view). */
  auth: { authorization: string };
  chain: FakeEvmChain;
  nodes: EvmNodeFake[];
}

/**
 * A chains file with one chain, `chain`, and a plans file with `unlimited` (`plan`), written in
 * `dir`: the environment that names them.
 */
export function chainServiceConfig(
  dir: string,
  chain: Record<string, unknown>,
  plan: Record<string, unknown> = { rps: 1_000_000 },
): { CHAINS_CONFIG: string; PLANS_CONFIG: string } {
  const CHAINS_CONFIG = join(dir, 'chains.json');
  writeFileSync(CHAINS_CONFIG, JSON.stringify({ chains: [chain] }));
  const PLANS_CONFIG = join(dir, 'plans.json');
  writeFileSync(PLANS_CONFIG, JSON.stringify({ unlimited: plan }));
  return { CHAINS_CONFIG, PLANS_CONFIG };
}

/** chainServiceConfig with one chain, `evm` (JSON-RPC, timeout 1 s, `chain` on top). */
export function evmServiceConfig(dir: string, chain: Record<string, unknown>, plan?: Record<string, unknown>): { CHAINS_CONFIG: string; PLANS_CONFIG: string } {
  return chainServiceConfig(dir, { id: 'evm', name: 'EVM', protocol: 'jsonrpc', timeoutMs: 1_000, ...chain }, plan);
}

/** What the tests of a file started, closed after each test (`afterEach(() => started.close())`). */
export class Started {
  private readonly opened: Array<{ close(): Promise<void> }> = [];
  private readonly dirs: string[] = [];

  /**
   * Starts `count` fake nodes of one chain (200 blocks, 8 to finality) and the service with them
   * as `UPSTREAM_EVM` on chain `evm` (timeout 1 s, head polls every 200 ms, `chainExtra` on top),
   * with a plan of no limit a test reaches (or `plan`, e.g. `{ rps: 1000, monthly_requests: 20 }`).
   */
  async serviceOnEvmNodes(
    count: number,
    chainExtra: Record<string, unknown> = {},
    plan: Record<string, unknown> = { rps: 1_000_000 },
  ): Promise<ServiceOnEvmNodes> {
    const chain = new FakeEvmChain(200, 8);
    const nodes = await Promise.all(Array.from({ length: count }, () => startEvmNodeFake(chain)));
    this.opened.push(...nodes);
    const dir = mkdtempSync(join(tmpdir(), 'gw-evm-nodes-'));
    this.dirs.push(dir);
    const config = evmServiceConfig(dir, { headPollMs: 200, upstreams: [{ url: 'http://127.0.0.1:1' }], ...chainExtra }, plan);
    const t = await startTestApp({ env: { ...config, UPSTREAM_EVM: nodes.map((n) => n.url).join(',') } });
    this.opened.push(t);
    const { url } = await listen(t);
    const token = await newToken(t, { plan: 'unlimited' });
    return { t, url: `${url}/evm/${token.token}`, accountId: token.accountId, auth: token.auth, chain, nodes };
  }

  async close(): Promise<void> {
    for (const o of this.opened.splice(0).reverse()) await o.close();
    for (const d of this.dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }
}

/**
 * Waits until the gateway follows the nodes' head and finalized block (heads are followed once
 * calls come: one `eth_chainId` is made, charged), then forgets the calls the nodes received.
 */
export async function headsFollowed({ t, url, chain, nodes }: ServiceOnEvmNodes): Promise<void> {
  const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
  await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'eth_chainId', params: [] }),
  });
  await until(() => heads.best === chain.head && heads.finalized === chain.finalized, 10_000);
  for (const node of nodes) node.calls.length = 0;
}

/** A JSON-RPC answer as a caller reads it; a body that is not JSON is an error naming what came. */
export interface RpcReply {
  status: number;
  body: { result?: unknown; error?: { code: number; message: string } };
}

let nextRpcId = 1;
/** One JSON-RPC call POSTed to `url` (the service's chain URL with its token). */
export async function rpc(url: string, method: string, params: unknown[] = []): Promise<RpcReply> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextRpcId++, method, params }),
  });
  const text = await r.text();
  try {
    return { status: r.status, body: JSON.parse(text) };
  } catch {
    return { status: r.status, body: { error: { code: 0, message: `not JSON: ${text.slice(0, 200)}` } } };
  }
}
