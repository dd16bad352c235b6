import { describe, expect, it } from 'vitest';
import { clientKey } from '../../src/commands/authThrottle.js';

describe('clientKey', () => {
  it('is the address for IPv4, also written IPv4-mapped', () => {
    expect(clientKey('203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
  });

  it('is the /64 for IPv6, however the address is written', () => {
    const key = '2001:db8:0:12::/64';
    for (const ip of ['2001:db8:0:12::1', '2001:0db8:0000:0012:ffff:ffff:ffff:ffff', '2001:DB8::12:1:2:3:4', '2001:db8:0:12:1::', '2001:db8:0:12::1%eth0']) {
      expect(clientKey(ip), ip).toBe(key);
    }
    expect(clientKey('::1')).toBe('0:0:0:0::/64');
    expect(clientKey('2001:db8:0:13::1')).not.toBe(key);
  });
});
