import type { FastifyInstance } from 'fastify';

/**
 * Request bodies on the chain-facing routes: every content type is read raw into a Buffer (the
 * handlers parse and answer errors in their protocol's shape), with the size limit enforced
 * here so an oversize body is a value, not an exception.
 */
export class BodyTooLarge {
  constructor(readonly limit: number) {}
}

export type RawBody = Buffer | BodyTooLarge;

/**
 * Reads a request body into one Buffer, or a BodyTooLarge once it passes `maxBodyBytes` (by its
 * declared Content-Length, without reading it, or as it arrives); the rest is drained unread.
 */
export function readRawBody(
  payload: NodeJS.ReadableStream,
  contentLength: string | undefined,
  maxBodyBytes: number,
  done: (err: Error | null, body: RawBody | undefined) => void,
): void {
  const declared = Number(contentLength);
  if (Number.isFinite(declared) && declared > maxBodyBytes) {
    payload.resume(); // drain and discard; the answer does not wait for it
    done(null, new BodyTooLarge(maxBodyBytes));
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let settled = false;
  payload.on('data', (chunk: Buffer) => {
    if (settled) return;
    size += chunk.length;
    if (size > maxBodyBytes) {
      settled = true;
      chunks.length = 0;
      done(null, new BodyTooLarge(maxBodyBytes));
      return;
    }
    chunks.push(chunk);
  });
  payload.on('end', () => {
    if (settled) return;
    settled = true;
    done(null, chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
  });
  payload.on('error', (err: Error) => {
    if (settled) return;
    settled = true;
    done(err, undefined);
  });
}

/** Replaces the encapsulated instance's parsers; call inside the routes' own plugin scope. */
export function registerRawBodyParser(fastify: FastifyInstance, maxBodyBytes: number): void {
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser('*', (request, payload, done) => {
    readRawBody(payload, request.headers['content-length'], maxBodyBytes, done);
  });
}

/**
 * Content types a JSON-RPC POST may carry. JSON is parsed whatever the label among these: some
 * clients send text/plain to skip a CORS preflight, and `curl -d` sends form encoding by
 * default. Anything else (multipart, octet-stream, XML…) is refused with 415.
 */
const JSON_RPC_MEDIA_TYPES = new Set([
  'application/json',
  'application/json-rpc',
  'application/jsonrequest',
  'text/plain',
  'application/x-www-form-urlencoded',
]);

export function isJsonRpcMediaType(contentType: string | undefined): boolean {
  // What nearly every client sends, answered without splitting and lower-casing it.
  if (contentType === 'application/json') return true;
  if (contentType === undefined || contentType.trim() === '') return true;
  const media = (contentType.split(';', 1)[0] ?? '').trim().toLowerCase();
  return JSON_RPC_MEDIA_TYPES.has(media) || /^application\/[a-z0-9.+-]*\+json$/.test(media);
}
