/** cluster-key-slot (ioredis's own dependency) ships no types. */
declare module 'cluster-key-slot' {
  /** The Redis Cluster slot of a key: CRC16 of its hash tag (the first non-empty `{…}`) or of the whole key, modulo 16384. */
  export default function calculateSlot(key: string | Buffer): number;
}
