import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY, retryDelayMs } from '../../src/alerts/backoff.js';
import { isPublicAddress } from '../../src/infra/notify/addressPolicy.js';
import { generateWebhookSecret, signWebhook, verifyWebhook, webhookHeaders } from '../../src/infra/notify/signing.js';

describe('Standard Webhooks signatures', () => {
  it('match the specification example', () => {
    // The example of the Standard Webhooks specification (and its reference libraries' tests).
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    expect(signWebhook(secret, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });
  it('verify with the secret only, within the timestamp tolerance', () => {
    const secret = generateWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const now = 1_800_000_000;
    const headers = webhookHeaders(secret, 'ntf_1', now, '{"a":1}');
    expect(verifyWebhook(secret, headers, '{"a":1}', { nowSeconds: now })).toBe(true);
    expect(verifyWebhook(secret, headers, '{"a":2}', { nowSeconds: now })).toBe(false);
    expect(verifyWebhook(generateWebhookSecret(), headers, '{"a":1}', { nowSeconds: now })).toBe(false);
    expect(verifyWebhook(secret, headers, '{"a":1}', { nowSeconds: now + 3600 })).toBe(false);
    expect(verifyWebhook(secret, { ...headers, 'webhook-signature': `v1,bogus ${headers['webhook-signature']}` }, '{"a":1}', { nowSeconds: now })).toBe(true);
  });
});

describe('the SSRF address policy', () => {
  const refused = [
    '127.0.0.1',
    '127.255.0.9',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '169.254.1.1',
    '0.0.0.0',
    '100.64.0.1',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd12:3456::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:169.254.169.254',
    '64:ff9b::a9fe:a9fe',
    '2002:a00:1::',
    '[::1]',
    'not-an-ip',
  ];
  const allowed = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '2002:808:808::'];
  for (const a of refused) it(`refuses ${a}`, () => expect(isPublicAddress(a)).toBe(false));
  for (const a of allowed) it(`allows ${a}`, () => expect(isPublicAddress(a)).toBe(true));
});

describe('retry backoff', () => {
  it('grows ×3 from the base, with up to half of it random, capped', () => {
    const policy = { ...DEFAULT_RETRY, baseMs: 1000, maxMs: 20_000 };
    expect([1, 2, 3, 4].map((n) => retryDelayMs(policy, n, () => 1))).toEqual([1000, 3000, 9000, 20_000]);
    expect([1, 2, 3].map((n) => retryDelayMs(policy, n, () => 0))).toEqual([500, 1500, 4500]);
  });
});
