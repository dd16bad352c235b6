import type { AdmissionRequest } from './admission.js';

/**
 * Where the caller put the token. `/<chain>/<token>/<path…>` and `/<chain>/<path…>` with a
 * Bearer header look alike, so: a first segment shaped like a token (`gk_…`, or `gka_…` which the
 * gatekeeper refuses) is the token; otherwise, with an Authorization header the segments are all
 * path; otherwise the first segment is taken as the token (and refused if it is not one).
 */
export interface Credentials {
  token: string | null;
  via: AdmissionRequest['via'];
  /** Path segments after the token (percent-encoded, as sent). */
  segments: string[];
}

/** Query parameters that carry credentials: refused (401) as a way to pass a token, never forwarded. */
export const AUTH_QUERY_PARAMS = new Set(['token', 'api_key', 'apikey', 'access_token']);

const TOKEN_SHAPE = /^gka?_/;

const decode = (segment: string): string => {
  // A token has no escapes: skip decoding (and its exception handling) for the common case.
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
};

/** Built whole, not spread into with the segments: `{ ...x, segments }` takes V8's slow path (~1 µs a call, docs/decisions.md). */
function fromAuthorization(header: string, segments: string[]): Credentials {
  const trimmed = header.trim();
  const space = trimmed.search(/\s/);
  const scheme = (space < 0 ? trimmed : trimmed.slice(0, space)).toLowerCase();
  const value = space < 0 ? '' : trimmed.slice(space).trim();
  if (scheme === 'bearer') return { token: value === '' ? null : value, via: 'bearer', segments };
  if (scheme === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const user = colon < 0 ? decoded : decoded.slice(0, colon);
    const password = colon < 0 ? '' : decoded.slice(colon + 1);
    return { token: password || user || null, via: 'basic', segments };
  }
  return { token: value || trimmed || null, via: 'other', segments };
}

function fromQuery(query: string): string | null {
  if (query === '') return null;
  for (const [key, value] of new URLSearchParams(query)) {
    if (AUTH_QUERY_PARAMS.has(key.toLowerCase()) && value !== '') return value;
  }
  return null;
}

export function extractCredentials(segments: string[], authorization: string | undefined, query: string): Credentials {
  const first = segments[0];
  const decodedFirst = first === undefined ? undefined : decode(first);
  if (decodedFirst !== undefined && TOKEN_SHAPE.test(decodedFirst)) return { token: decodedFirst, via: 'path', segments: segments.slice(1) };
  if (authorization !== undefined && authorization.trim() !== '') return fromAuthorization(authorization, segments);
  const queryToken = fromQuery(query);
  if (queryToken !== null) return { token: queryToken, via: 'query', segments };
  if (decodedFirst !== undefined) return { token: decodedFirst, via: 'path', segments: segments.slice(1) };
  return { token: null, via: null, segments };
}
