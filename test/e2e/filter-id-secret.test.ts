import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { filterKeys, filterTag } from '../../src/gateway/upstreams/filters.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * FILTER_ID_SECRET (docs/decisions.md, "A secret in the filter ids' key"): a filter id's tag is
 * keyed by each node's configuration, which for a node behind a public URL a caller knows; it
 * could then compute, for its own token, the tag of another caller's filter on a node that
 * numbers filters (ganache: 0x1, 0x2…) and poll it. With the secret set on every gateway, a tag
 * computed from what a caller knows reaches no filter, while the gateways started with the same
 * secret (here: the service, then started again on the same data) poll each other's filter ids;
 * one with another secret, or none, does not. Unset, the tags are as before the setting existed.
 */

const SECRET = 'a5c1f0e9b2d84c7e9f10a2b3c4d5e6f7-shared-by-every-gateway';
const OTHER_SECRET = 'b6d2a1f0c3e95d8f0a21b3c4d5e6f7a8-another-deployment';
const FILTER_NOT_FOUND = { code: -32000, message: 'filter not found' };

let node: GanacheNode;
let t: TestApp | undefined;
let url: string;
let dataDir: string;
let configDir: string;
let chainsFile: string;
type Owner = Awaited<ReturnType<typeof newToken>>;
let alice: Owner;
let bob: Owner;

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };
let nextId = 1;

async function rpc(who: Owner, method: string, params: unknown[] = []): Promise<RpcAnswer> {
  const r = await fetch(`${url}/one/${who.token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  return (await r.json()) as RpcAnswer;
}

async function direct(method: string, params: unknown[] = []): Promise<unknown> {
  const r = await fetch(node.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return ((await r.json()) as RpcAnswer).result;
}

/** Mines a block on the node; its hash, which a block filter hands over next. */
async function mine(): Promise<string> {
  await direct('evm_mine');
  return ((await direct('eth_getBlockByNumber', ['latest', false])) as { hash: string }).hash;
}

/** The service (again, on the same data: the same tokens), with this FILTER_ID_SECRET or none. */
async function startWith(secret: string | null): Promise<void> {
  await t?.close({ keepData: true });
  t = await startTestApp({ dataDir, env: { CHAINS_CONFIG: chainsFile, ...(secret === null ? {} : { FILTER_ID_SECRET: secret }) } });
  ({ url } = await listen(t));
}

/**
 * What a caller can compute without any secret: the node's label (error messages show it), its
 * public URL, no headers, its own token id and the node's number in another caller's filter id.
 */
function forged(who: Owner, filterId: string): string {
  const digits = filterId.slice(10);
  const [key] = filterKeys([{ label: 'one-a', url: new URL(node.url), headers: {} }], null);
  return `0x${filterTag(key as Buffer, who.tokenId, digits)}${digits}`;
}

beforeAll(async () => {
  node = await startGanache();
  configDir = mkdtempSync(join(tmpdir(), 'gw-filter-secret-'));
  dataDir = mkdtempSync(join(tmpdir(), 'gw-filter-secret-data-'));
  chainsFile = join(configDir, 'chains.json');
  // One node, numbering its filters, behind a URL the callers know (a public one).
  writeFileSync(
    chainsFile,
    JSON.stringify({
      chains: [{ id: 'one', name: 'one', protocol: 'jsonrpc', timeoutMs: 5_000, headPollMs: 200, upstreams: [{ url: node.url, label: 'one-a' }] }],
    }),
  );
  await startWith(null);
  [alice, bob] = await Promise.all([newToken(t as TestApp, { plan: 'unlimited' }), newToken(t as TestApp, { plan: 'unlimited' })]);
});

afterAll(async () => {
  await t?.close();
  await node?.close();
  rmSync(configDir, { recursive: true, force: true });
});

describe('FILTER_ID_SECRET', () => {
  it('unset: the tags are as before it existed, so a caller who knows a public node computes the tag of another’s filter', async () => {
    await startWith(null);
    const alices = (await rpc(alice, 'eth_newBlockFilter')).result as string;
    const head = await mine();
    // What the secret is for: Bob reads Alice's filter with an id he computed.
    expect(await rpc(bob, 'eth_getFilterChanges', [forged(bob, alices)])).toMatchObject({ result: [head] });
  });

  it('set: a tag computed from what a caller knows reaches no filter; the same secret after a restart polls the filter, another secret or none does not', async () => {
    await startWith(SECRET);
    const alices = (await rpc(alice, 'eth_newBlockFilter')).result as string;
    expect(alices).toMatch(/^0x[1-9a-f][0-9a-f]{7}[0-9a-f]+$/);
    expect(await rpc(bob, 'eth_getFilterChanges', [forged(bob, alices)])).toMatchObject({ error: FILTER_NOT_FOUND });
    expect(await rpc(bob, 'eth_uninstallFilter', [forged(bob, alices)])).toMatchObject({ error: FILTER_NOT_FOUND });
    // Alice's own id computed without the secret is no id of hers either.
    expect(await rpc(alice, 'eth_getFilterChanges', [forged(alice, alices)])).toMatchObject({ error: FILTER_NOT_FOUND });
    // Her filter is whole: Bob's tries reached no node.
    const first = await mine();
    expect(await rpc(alice, 'eth_getFilterChanges', [alices])).toMatchObject({ result: [first] });

    // Another gateway of the deployment: the same secret, and the filter id is one it knows.
    await startWith(SECRET);
    const second = await mine();
    expect(await rpc(alice, 'eth_getFilterChanges', [alices])).toMatchObject({ result: [second] });
    expect(await rpc(bob, 'eth_getFilterChanges', [forged(bob, alices)])).toMatchObject({ error: FILTER_NOT_FOUND });

    // A gateway with another secret, or none, does not know it.
    await startWith(OTHER_SECRET);
    expect(await rpc(alice, 'eth_getFilterChanges', [alices])).toMatchObject({ error: FILTER_NOT_FOUND });
    await startWith(null);
    expect(await rpc(alice, 'eth_getFilterChanges', [alices])).toMatchObject({ error: FILTER_NOT_FOUND });
    // The filter is still on the node, for the gateways that share the secret.
    await startWith(SECRET);
    const third = await mine();
    expect(await rpc(alice, 'eth_getFilterChanges', [alices])).toMatchObject({ result: [third] });
    expect(await rpc(alice, 'eth_uninstallFilter', [alices])).toMatchObject({ result: true });
  });
});
