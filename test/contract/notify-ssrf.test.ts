import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatSender } from '../../src/infra/notify/chat.js';
import type { AlertNotification } from '../../src/infra/notify/port.js';
import { createHttpPoster } from '../../src/infra/notify/safeHttp.js';
import { webhookSender } from '../../src/infra/notify/webhook.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';

/**
 * The SSRF rule at connect time: a URL whose host is, or resolves to, a loopback address is
 * refused before any byte is sent, unless the operator allows private addresses. Only loopback
 * receivers are used (the test never sends traffic elsewhere).
 */
let receiver: FakeUpstream;
const strict = createHttpPoster({ guard: true, allowPrivate: false, timeoutMs: 2000 });
const allowing = createHttpPoster({ guard: true, allowPrivate: true, timeoutMs: 2000 });
const notification: AlertNotification = {
  id: 'ntf_ssrf',
  kind: 'fired',
  at: new Date().toISOString(),
  accountId: 'acc_1',
  value: 1,
  summary: 'x',
  alert: { id: 'alr_1', name: 'n', type: 'error_rate', condition: null, threshold: 1, windowMinutes: 5, tokenId: null },
};
const hook = (url: string) => ({ type: 'webhook' as const, id: 'chn_1', active: true, url, secret: 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0' });

beforeAll(async () => {
  receiver = await startFake(() => ({ body: { ok: true } }));
});
afterAll(async () => {
  await strict.close();
  await allowing.close();
  await receiver?.close();
});

describe('without NOTIFY_ALLOW_PRIVATE', () => {
  const port = () => new URL(receiver.url).port;
  it('refuses a literal loopback address', async () => {
    receiver.reset();
    const result = await webhookSender(strict).send(hook(`http://127.0.0.1:${port()}/h`), notification);
    expect(result).toMatchObject({ outcome: 'refused', error: expect.stringContaining('127.0.0.1') });
    expect(receiver.calls).toHaveLength(0);
  });
  it('refuses a name that resolves to loopback, when connecting (the name is looked up by the guard)', async () => {
    receiver.reset();
    const result = await webhookSender(strict).send(hook(`http://localhost:${port()}/h`), notification);
    expect(result).toMatchObject({ outcome: 'refused', error: expect.stringMatching(/^localhost resolves to a private, loopback or link-local address/) });
    // The owner reads this error: it must not map the operator's internal names to their addresses.
    expect((result as { error: string }).error).not.toMatch(/127\.0\.0\.1|::1/);
    expect(receiver.calls).toHaveLength(0);
  });
  it('refuses IPv6 loopback and v4-mapped loopback literals', async () => {
    for (const host of ['[::1]', '[::ffff:127.0.0.1]']) {
      expect(await webhookSender(strict).send(hook(`http://${host}:${port()}/h`), notification)).toMatchObject({ outcome: 'refused' });
    }
    expect(receiver.calls).toHaveLength(0);
  });
  it('applies to team-chat URLs too', async () => {
    expect(await chatSender(strict).send({ type: 'chat', id: 'chn_2', active: true, url: `http://localhost:${port()}/c` }, notification)).toMatchObject({
      outcome: 'refused',
    });
  });
});

describe('with NOTIFY_ALLOW_PRIVATE=true', () => {
  it('delivers to loopback, by address and by name', async () => {
    receiver.reset();
    const port = new URL(receiver.url).port;
    expect(await webhookSender(allowing).send(hook(`http://127.0.0.1:${port}/h`), notification)).toMatchObject({ outcome: 'delivered' });
    expect(await webhookSender(allowing).send(hook(`http://localhost:${port}/h`), notification)).toMatchObject({ outcome: 'delivered' });
    expect(receiver.calls.length).toBeGreaterThanOrEqual(1);
  });
});
