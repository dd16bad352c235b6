import type { Problem } from '../api/types.js';

/** A refusal or failure, carrying the server's problem+json (or one made up for network errors). */
export class ApiError extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
    this.name = 'ApiError';
  }

  get status(): number {
    return this.problem.status;
  }

  /** The route does not exist on this server (a feature not deployed yet), unlike a missing record. */
  get isMissingEndpoint(): boolean {
    return this.problem.status === 404 && this.problem.detail.startsWith('No route');
  }
}

/** RFC 9457's type of a problem that says no more than its status: for the ones made up here. */
const BLANK = 'about:blank';

/** Any failure as an ApiError, so the page shows every error the same way. */
export const asApiError = (error: unknown): ApiError =>
  error instanceof ApiError ? error : new ApiError({ type: BLANK, title: 'Error', status: 0, detail: String(error), code: 'client_error' });

export interface RequestOptions {
  method?: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  body?: unknown;
  signal?: AbortSignal;
}

export interface Download {
  blob: Blob;
  filename: string;
}

const isJson = (res: Response): boolean => /json/i.test(res.headers.get('content-type') ?? '');

async function problemOf(res: Response): Promise<Problem> {
  if (isJson(res)) {
    try {
      const body = (await res.json()) as Partial<Problem>;
      if (typeof body.detail === 'string') {
        return {
          type: body.type ?? BLANK,
          title: body.title ?? res.statusText,
          status: res.status,
          detail: body.detail,
          code: body.code ?? `http_${res.status}`,
          errors: body.errors,
        };
      }
    } catch {
      // Not the JSON it claimed to be: fall through to a generic problem.
    }
  }
  return {
    type: BLANK,
    title: res.statusText || 'Error',
    status: res.status,
    detail: `The server answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}.`,
    code: `http_${res.status}`,
  };
}

const networkProblem = (): Problem => ({
  type: BLANK,
  title: 'Network error',
  status: 0,
  detail: 'Cannot reach the server. Check the connection and try again.',
  code: 'network',
});

/** Auth calls answer 401 for wrong credentials: those must reach the form, not re-open the login. */
const isAuthCall = (path: string): boolean => path.startsWith('/api/v1/auth/');

/**
 * The dashboard's HTTP client. A 401 on any call means the session ended: it asks `relogin` to
 * get the owner logged in again (the page stays as it is, forms keep what was typed), then
 * retries the call once, so the action the owner took still happens.
 */
export class ApiClient {
  /** `relogin` resolves true once the owner is logged in again, false when nobody was logged in. */
  constructor(private readonly relogin: () => Promise<boolean>) {}

  get<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.request<T>(path, { signal });
  }

  post<T>(path: string, body?: unknown): Promise<T> {
    return this.request<T>(path, { method: 'POST', body });
  }

  patch<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>(path, { method: 'PATCH', body });
  }

  delete<T>(path: string): Promise<T> {
    return this.request<T>(path, { method: 'DELETE' });
  }

  async request<T>(path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.send(path, options, 'application/json');
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  /** A file (an export): the body as a blob and the name the server suggests. */
  async download(path: string, fallbackName: string): Promise<Download> {
    const res = await this.send(path, {}, '*/*');
    const disposition = res.headers.get('content-disposition') ?? '';
    const named = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
    return { blob: await res.blob(), filename: named?.[1] ? decodeURIComponent(named[1]) : fallbackName };
  }

  private async send(path: string, options: RequestOptions, accept: string, retried = false): Promise<Response> {
    const headers: Record<string, string> = { accept };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(path, {
        method: options.method ?? 'GET',
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        credentials: 'same-origin',
        signal: options.signal,
      });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      throw new ApiError(networkProblem());
    }
    if (res.ok) return res;
    if (res.status === 401 && !retried && !isAuthCall(path) && (await this.relogin())) {
      return this.send(path, options, accept, true);
    }
    throw new ApiError(await problemOf(res));
  }
}

/** A query string from the defined values only. */
export function query(params: Record<string, string | number | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}
