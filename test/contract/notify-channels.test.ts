import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AlertChannel } from '../../src/domain/alertEvents.js';
import { smtpTransport } from '../../src/infra/notify/email.js';
import { createSenders, type NotifyConfig } from '../../src/infra/notify/index.js';
import type { AlertNotification } from '../../src/infra/notify/port.js';
import { generateWebhookSecret, verifyWebhook } from '../../src/infra/notify/signing.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';

/** Each channel's sender against a real loopback receiver: the wire format, headers and how answers are classified. */
const dir = mkdtempSync(join(tmpdir(), 'gw-notify-'));
const outboxPath = join(dir, 'outbox.ndjson');
let receiver: FakeUpstream;
let answer: { status: number; body: unknown } = { status: 200, body: { ok: true } };
let parts: ReturnType<typeof createSenders>;

const notification: AlertNotification = {
  id: 'ntf_0123456789abcdef',
  kind: 'fired',
  at: '2026-11-21T12:00:00.000Z',
  accountId: 'acc_1',
  alert: { id: 'alr_0123456789abcdef', name: 'Errors on eth', type: 'error_rate', condition: null, threshold: 5, windowMinutes: 5, tokenId: null },
  value: 12.5,
  summary: 'Error rate of the account is 12.5% over the last 5 min (5 of 40 requests; threshold 5%).',
};
const config = (over: Partial<NotifyConfig> = {}): NotifyConfig => ({
  allowPrivate: true,
  timeoutMs: 2000,
  email: { smtpUrl: null, from: 'Gateway <alerts@example.com>', outboxPath },
  incident: { eventsUrl: receiver.url },
  sms: { apiUrl: receiver.url, accountSid: 'AC0123456789', authToken: 'sms-secret', from: '+15005550006' },
  maxAttempts: 3,
  retryBaseMs: 10,
  ...over,
});
const webhook = (secret: string): Extract<AlertChannel, { type: 'webhook' }> => ({
  type: 'webhook',
  id: 'chn_w',
  active: true,
  url: `${receiver.url}/hooks/alerts`,
  secret,
});

beforeAll(async () => {
  receiver = await startFake(() => ({ status: answer.status, body: answer.body }));
  parts = createSenders(config());
});
afterAll(async () => {
  await parts?.close();
  await receiver?.close();
  rmSync(dir, { recursive: true, force: true });
});
const reset = (status = 200, body: unknown = { ok: true }) => {
  receiver.reset();
  answer = { status, body };
};

describe('webhook (Standard Webhooks)', () => {
  it('POSTs signed JSON that verifies with the endpoint secret', async () => {
    reset();
    const secret = generateWebhookSecret();
    const result = await parts.senders.webhook.send(webhook(secret), notification);
    expect(result).toEqual({ outcome: 'delivered', status: 200 });
    const [call] = receiver.calls;
    expect(call).toMatchObject({ method: 'POST', url: '/hooks/alerts' });
    expect(call?.headers['content-type']).toBe('application/json');
    expect(call?.headers['webhook-id']).toBe(notification.id);
    expect(Math.abs(Number(call?.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(5);
    expect(call?.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(verifyWebhook(secret, call?.headers ?? {}, call?.body ?? '')).toBe(true);
    expect(verifyWebhook(generateWebhookSecret(), call?.headers ?? {}, call?.body ?? '')).toBe(false);
    expect(JSON.parse(call?.body ?? '')).toEqual({
      type: 'alert.fired',
      timestamp: notification.at,
      data: {
        notification_id: notification.id,
        state: 'firing',
        summary: notification.summary,
        value: 12.5,
        alert: { id: notification.alert.id, name: 'Errors on eth', type: 'error_rate', condition: null, threshold: 5, window_minutes: 5, token_id: null },
      },
    });
  });
  it('classifies answers: 410 gone, 5xx and 429 retryable, other 4xx final', async () => {
    const secret = generateWebhookSecret();
    reset(410, { error: 'gone' });
    expect(await parts.senders.webhook.send(webhook(secret), notification)).toMatchObject({ outcome: 'gone', status: 410 });
    reset(503);
    expect(await parts.senders.webhook.send(webhook(secret), notification)).toMatchObject({ outcome: 'failed', retryable: true, status: 503 });
    reset(429);
    expect(await parts.senders.webhook.send(webhook(secret), notification)).toMatchObject({ outcome: 'failed', retryable: true, status: 429 });
    reset(400, { error: 'bad' });
    expect(await parts.senders.webhook.send(webhook(secret), notification)).toMatchObject({
      outcome: 'failed',
      retryable: false,
      status: 400,
      error: expect.stringContaining('HTTP 400'),
    });
  });
  it('a closed port is a retryable failure', async () => {
    const closed = await startFake(() => ({ body: {} }));
    const url = closed.url;
    await closed.close();
    expect(await parts.senders.webhook.send({ ...webhook(generateWebhookSecret()), url }, notification)).toMatchObject({
      outcome: 'failed',
      retryable: true,
      status: null,
      error: expect.stringContaining('ECONNREFUSED'),
    });
  });
});

describe('team chat (Slack-compatible incoming webhook)', () => {
  it('POSTs {text, blocks}', async () => {
    reset(200, 'ok');
    const result = await parts.senders.chat.send({ type: 'chat', id: 'chn_c', active: true, url: `${receiver.url}/services/T0/B0/X` }, notification);
    expect(result.outcome).toBe('delivered');
    const body = JSON.parse(receiver.calls[0]?.body ?? '');
    expect(body.text).toBe(`[FIRING] Errors on eth: ${notification.summary}`);
    expect(body.blocks).toEqual([
      { type: 'header', text: { type: 'plain_text', text: '[FIRING] Errors on eth' } },
      { type: 'section', text: { type: 'mrkdwn', text: notification.summary } },
      { type: 'context', elements: [{ type: 'mrkdwn', text: expect.stringContaining('error_rate · threshold 5 · window 5 min') }] },
    ]);
  });
  it('410 (archived channel) is gone', async () => {
    reset(410, 'channel_is_archived');
    expect((await parts.senders.chat.send({ type: 'chat', id: 'chn_c', active: true, url: `${receiver.url}/x` }, notification)).outcome).toBe('gone');
  });
});

describe('incident management (PagerDuty Events API v2)', () => {
  const channel = { type: 'incident' as const, id: 'chn_i', active: true, routingKey: 'R0UT1NGKEY0123456789abcdef012345' };
  it('triggers with the alert id as dedup key', async () => {
    reset(202, { status: 'success', message: 'Event processed', dedup_key: notification.alert.id });
    expect(await parts.senders.incident.send(channel, notification)).toEqual({ outcome: 'delivered', status: 202 });
    const [call] = receiver.calls;
    expect(call?.url).toBe('/v2/enqueue');
    expect(JSON.parse(call?.body ?? '')).toEqual({
      routing_key: channel.routingKey,
      event_action: 'trigger',
      dedup_key: notification.alert.id,
      client: 'Chain Gateway',
      payload: {
        summary: `Errors on eth: ${notification.summary}`,
        source: 'chain-gateway',
        severity: 'error',
        timestamp: notification.at,
        component: 'error_rate',
        custom_details: { alert_id: notification.alert.id, condition: null, threshold: 5, value: 12.5, window_minutes: 5, token_id: null },
      },
    });
  });
  it('resolves the same incident', async () => {
    reset(202, { status: 'success' });
    await parts.senders.incident.send(channel, { ...notification, kind: 'resolved' });
    expect(JSON.parse(receiver.calls[0]?.body ?? '')).toEqual({ routing_key: channel.routingKey, event_action: 'resolve', dedup_key: notification.alert.id });
  });
  it('an operator URL is trusted: loopback works without NOTIFY_ALLOW_PRIVATE', async () => {
    reset(202, { status: 'success' });
    const strict = createSenders(config({ allowPrivate: false }));
    try {
      expect((await strict.senders.incident.send(channel, notification)).outcome).toBe('delivered');
    } finally {
      await strict.close();
    }
  });
});

describe('SMS (Twilio-compatible Messages API)', () => {
  it('POSTs form-encoded To, From, Body with basic auth to the account path', async () => {
    reset(201, { sid: 'SM1', status: 'queued' });
    expect(await parts.senders.sms.send({ type: 'sms', id: 'chn_s', active: true, to: '+14155550100' }, notification)).toEqual({
      outcome: 'delivered',
      status: 201,
    });
    const [call] = receiver.calls;
    expect(call?.url).toBe('/2010-04-01/Accounts/AC0123456789/Messages.json');
    expect(call?.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(call?.headers.authorization).toBe(`Basic ${Buffer.from('AC0123456789:sms-secret').toString('base64')}`);
    const form = new URLSearchParams(call?.body ?? '');
    expect(Object.fromEntries(form)).toEqual({ To: '+14155550100', From: '+15005550006', Body: `[FIRING] Errors on eth: ${notification.summary}` });
  });
  it('is skipped (not retried) when the operator has not configured it', async () => {
    const bare = createSenders(config({ sms: { apiUrl: receiver.url, accountSid: null, authToken: null, from: null } }));
    try {
      expect(await bare.senders.sms.send({ type: 'sms', id: 'chn_s', active: true, to: '+14155550100' }, notification)).toMatchObject({ outcome: 'skipped' });
    } finally {
      await bare.close();
    }
  });
});

describe('email', () => {
  it('without SMTP_URL, appends one JSON line per email to the outbox', async () => {
    await parts.senders.email.send({ type: 'email', id: 'chn_e', active: true, to: 'ops@example.com' }, notification);
    await parts.senders.email.send({ type: 'email', id: 'chn_e', active: true, to: 'ops@example.com' }, { ...notification, kind: 'resolved' });
    const lines = readFileSync(outboxPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      messageId: `<${notification.id}@chain-gateway>`,
      from: 'Gateway <alerts@example.com>',
      to: 'ops@example.com',
      subject: '[FIRING] Errors on eth',
      text: expect.stringContaining(notification.summary),
    });
    expect(lines[1]).toMatchObject({ subject: '[RESOLVED] Errors on eth', text: expect.stringMatching(/^Resolved: /) });
  });

  it('with SMTP_URL, speaks SMTP to the server', async () => {
    const smtp = await startSmtpServer();
    const transport = smtpTransport(`smtp://127.0.0.1:${smtp.port}`, 2000);
    try {
      const { emailSender } = await import('../../src/infra/notify/email.js');
      const result = await emailSender(transport, 'alerts@example.com').send({ type: 'email', id: 'chn_e', active: true, to: 'ops@example.com' }, notification);
      expect(result).toEqual({ outcome: 'delivered', status: null });
      expect(smtp.envelopes).toHaveLength(1);
      expect(smtp.envelopes[0]?.from).toBe('<alerts@example.com>');
      expect(smtp.envelopes[0]?.to).toEqual(['<ops@example.com>']);
      expect(smtp.envelopes[0]?.data).toMatch(/Subject: \[FIRING\] Errors on eth/);
      smtp.refuseRecipients = true;
      expect(
        await emailSender(transport, 'alerts@example.com').send({ type: 'email', id: 'chn_e', active: true, to: 'nobody@example.com' }, notification),
      ).toMatchObject({ outcome: 'failed', retryable: false, status: 550 });
    } finally {
      await transport.close();
      await smtp.close();
    }
  });
});

/** The least of an SMTP server (RFC 5321) a client needs to hand over a message: enough for a real nodemailer exchange. */
async function startSmtpServer() {
  const envelopes: Array<{ from: string; to: string[]; data: string }> = [];
  const sockets = new Set<Socket>();
  const state = { refuseRecipients: false };
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let buffer = '';
    let inData = false;
    let current = { from: '', to: [] as string[], data: '' };
    const reply = (line: string) => socket.write(`${line}\r\n`);
    reply('220 test ESMTP');
    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      for (;;) {
        if (inData) {
          const end = buffer.indexOf('\r\n.\r\n');
          if (end < 0) return;
          current.data = buffer.slice(0, end);
          buffer = buffer.slice(end + 5);
          inData = false;
          envelopes.push(current);
          current = { from: '', to: [], data: '' };
          reply('250 queued');
          continue;
        }
        const nl = buffer.indexOf('\r\n');
        if (nl < 0) return;
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') reply('250 test');
        else if (verb === 'MAIL') {
          current.from = line.slice(10).trim();
          reply('250 ok');
        } else if (verb === 'RCPT') {
          if (state.refuseRecipients) reply('550 no such user');
          else {
            current.to.push(line.slice(8).trim());
            reply('250 ok');
          }
        } else if (verb === 'DATA') {
          inData = true;
          reply('354 go on');
        } else if (verb === 'QUIT') {
          reply('221 bye');
          socket.end();
        } else if (verb === 'RSET' || verb === 'NOOP') reply('250 ok');
        else reply('502 not implemented');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    envelopes,
    set refuseRecipients(v: boolean) {
      state.refuseRecipients = v;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
