import { cutText } from '../../domain/storableText.js';
import type { DeliveryResult } from './port.js';
import { addressRefusal, type HttpPoster } from './safeHttp.js';

/** Statuses worth trying again: the receiver is busy, restarting or rate limiting us. */
const RETRYABLE = (status: number) => status === 408 || status === 425 || status === 429 || status >= 500;

const describe = (e: unknown): string => {
  const err = e as { code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } };
  const code = err.cause?.code ?? err.code;
  const message = String(err.cause?.message ?? err.message ?? e);
  return (typeof code === 'string' && !message.includes(code) ? `${code}: ${message}` : message).slice(0, 300);
};

/**
 * One POST, classified: 2xx delivered; 410 gone where the channel is an endpoint the owner gave
 * (it is switched off); 408/425/429/5xx and network errors retryable; other answers final.
 */
export async function postForDelivery(
  poster: HttpPoster,
  url: string,
  init: { headers: Record<string, string>; body: string },
  options: { goneDisables: boolean },
): Promise<DeliveryResult> {
  try {
    const res = await poster.post(url, init);
    if (res.status >= 200 && res.status < 300) return { outcome: 'delivered', status: res.status };
    const error = `HTTP ${res.status}${res.body ? `: ${cutText(res.body, 200)}` : ''}`;
    if (res.status === 410 && options.goneDisables) return { outcome: 'gone', status: 410, error };
    return { outcome: 'failed', retryable: RETRYABLE(res.status), status: res.status, error };
  } catch (e) {
    const refused = addressRefusal(e);
    if (refused) return { outcome: 'refused', error: refused.message };
    return { outcome: 'failed', retryable: true, status: null, error: describe(e) };
  }
}
