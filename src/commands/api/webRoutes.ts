import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, gzipSync, constants as zlib } from 'node:zlib';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { problem, sendProblem } from './problem.js';

/**
 * The owners' dashboard (src/web, built by Vite into dist/web): `GET /` is the page and
 * `GET /assets/*` its hashed files. The dashboard routes by hash (`/#/tokens`), so these two
 * are all it needs and no dashboard path can shadow a chain route (`/<chain>/…`).
 */
export interface WebRoutesOptions {
  /** The built dashboard; by default `dist/web` of the project this module belongs to. */
  root?: string;
}

interface WebFile {
  body: Buffer;
  gzip: Buffer | null;
  br: Buffer | null;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.webp': 'image/webp',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};
const COMPRESSIBLE = /^(text\/|application\/json|image\/svg)/;

/**
 * The page's policy: only this origin's scripts, styles and API; no framing. Styles set through
 * the DOM (Preact, uPlot) are not inline style attributes, so no 'unsafe-inline' is needed.
 */
export const PAGE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; " +
  "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
export const PAGE_HEADERS = {
  'content-security-policy': PAGE_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};
const ASSET_CACHE = 'public, max-age=31536000, immutable';

/** dist/web of the project: the nearest directory up from here holding package.json (works from src/ and dist/src/). */
export function defaultWebRoot(from = dirname(fileURLToPath(import.meta.url))): string {
  let dir = from;
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) return join(from, 'web');
    dir = parent;
  }
  return join(dir, 'dist', 'web');
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? listFiles(path) : entry.isFile() ? [path] : [];
  });
}

/** Reads the whole build once (a few small files), compressed ahead of time. Null when not built. */
export function loadWebFiles(root: string): Map<string, WebFile> | null {
  if (!existsSync(join(root, 'index.html'))) return null;
  const files = new Map<string, WebFile>();
  for (const path of listFiles(root)) {
    const body = readFileSync(path);
    const type = TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
    const worthIt = COMPRESSIBLE.test(type) && body.length > 1024;
    files.set(relative(root, path).split(sep).join('/'), {
      body,
      gzip: worthIt ? gzipSync(body, { level: 9 }) : null,
      br: worthIt ? brotliCompressSync(body, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: body.length } }) : null,
      type,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
    });
  }
  return files;
}

function send(request: FastifyRequest, reply: FastifyReply, file: WebFile, headers: Record<string, string>): FastifyReply {
  reply.headers(headers).header('content-type', file.type).header('etag', file.etag);
  if (file.gzip) reply.header('vary', 'accept-encoding');
  if (request.headers['if-none-match'] === file.etag) return reply.code(304).send();
  const accepts = String(request.headers['accept-encoding'] ?? '');
  if (file.br && /\bbr\b/.test(accepts)) return reply.header('content-encoding', 'br').send(file.br);
  if (file.gzip && /\bgzip\b/.test(accepts)) return reply.header('content-encoding', 'gzip').send(file.gzip);
  return reply.send(file.body);
}

export const webRoutes: FastifyPluginAsync<WebRoutesOptions> = async (app, options) => {
  const root = options.root ?? defaultWebRoot();
  const indexPath = join(root, 'index.html');
  const builtAt = (): number | null => (existsSync(indexPath) ? statSync(indexPath).mtimeMs : null);
  let loaded = { at: builtAt(), files: loadWebFiles(root) };
  // A new build (Vite writes index.html last) is picked up by the next page load, without a restart.
  const current = (): Map<string, WebFile> | null => {
    const at = builtAt();
    if (at !== loaded.at) loaded = { at, files: loadWebFiles(root) };
    return loaded.files;
  };

  app.get('/', async (request, reply) => {
    const index = current()?.get('index.html');
    if (!index) {
      return reply
        .code(503)
        .type('text/plain; charset=utf-8')
        .send('The dashboard is not built. Run `npm run build` (or `npx vite build --config src/web/vite.config.ts`) and reload.\n');
    }
    return send(request, reply, index, PAGE_HEADERS);
  });

  app.get<{ Params: { '*': string } }>('/assets/*', async (request, reply) => {
    const file = loaded.files?.get(`assets/${request.params['*']}`);
    if (!file) return sendProblem(reply, problem(404, 'not_found', 'No such dashboard file; reload the page to get the current dashboard.'));
    return send(request, reply, file, { 'cache-control': ASSET_CACHE, 'x-content-type-options': 'nosniff' });
  });
};
