/**
 * Settings the tests' services start with unless a test gives its own: timers that only make a
 * test wait. The projector's usage linger (250 ms by default, for fewer writes per call) is 20 ms
 * here, so a test waiting to see its calls in the metrics waits that much less each time.
 */
export const TEST_TIMERS: Record<string, string> = { USAGE_LINGER_MS: '20' };
