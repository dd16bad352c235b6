import { describe, expect, it } from 'vitest';
import { processSemiSpaceMb } from '../../src/infra/storagethread/index.js';

/** What the storage thread puts back once its own, larger young generation is made (src/infra/storagethread/index.ts). */
describe('the process’s --max-semi-space-size', () => {
  it('is read from the command line, NODE_OPTIONS first so that the command line wins', () => {
    expect(processSemiSpaceMb(['--max-semi-space-size=8'], '')).toBe(8);
    expect(processSemiSpaceMb(['--max-semi-space-size=8'], '--max-semi-space-size=64')).toBe(8);
    expect(processSemiSpaceMb([], '--enable-source-maps  --max_semi_space_size=16')).toBe(16);
  });

  it('is the last one given, in either spelling V8 accepts', () => {
    expect(processSemiSpaceMb(['--max-semi-space-size=8', '--max_semi_space_size=32'], '')).toBe(32);
  });

  it('is 0, V8’s “not set”, when none is given or none is a number', () => {
    expect(processSemiSpaceMb([], '')).toBe(0);
    expect(processSemiSpaceMb(['--max-old-space-size=512', '--min-semi-space-size=4', '--max-semi-space-size=big'], '')).toBe(0);
  });
});
