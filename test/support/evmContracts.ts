/**
 * Tiny EVM contracts assembled by hand (no compiler in the tests), and a raw JSON-RPC POST, for
 * comparing a node's own answers with the gateway's.
 */

type Hex = `0x${string}`;

const byte = (n: number): string => {
  if (!Number.isInteger(n) || n < 0 || n > 0xff) throw new Error(`${n} does not fit a PUSH1`);
  return n.toString(16).padStart(2, '0');
};

/** Init code that deploys `runtime` (hex without 0x): CODECOPY it past this 12-byte prefix, then RETURN it. */
export function deployCode(runtime: string): Hex {
  const length = byte(runtime.length / 2);
  return `0x60${length}600c60003960${length}6000f3${runtime}`;
}

/** Runtime code that REVERTs every call with `data` (copied from the code's tail, past a 12-byte prefix). */
export function revertingRuntime(data: Hex): string {
  const payload = data.slice(2);
  const length = byte(payload.length / 2);
  return `60${length}600c60003960${length}6000fd${payload}`;
}

/** Runtime code that emits LOG1(`topic`) with the calldata as the log's data, and stops. */
export function loggingRuntime(topic: Hex): string {
  if (topic.length !== 66) throw new Error('a topic is 32 bytes');
  // CALLDATACOPY(0, 0, CALLDATASIZE) 366000600037; PUSH32 topic 7f…; LOG1(0, CALLDATASIZE, topic) 366000a1; STOP 00
  return `3660006000377f${topic.slice(2)}366000a100`;
}

export interface RawAnswer {
  status: number;
  /** The answer parsed (null when the body is empty). */
  json: unknown;
}

/** POSTs a JSON-RPC body as it is to `url`. */
export async function postJsonRpc(url: string, body: unknown, headers: Record<string, string> = {}): Promise<RawAnswer> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await response.text();
  return { status: response.status, json: text === '' ? null : (JSON.parse(text) as unknown) };
}
