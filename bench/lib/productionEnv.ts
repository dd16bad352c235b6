/**
 * What `npm start` (package.json) and the Docker image run the service with besides its
 * configuration (docs/operations.md, Memory): the benchmarks start the gateway the same way,
 * and test/unit/production-env.test.ts keeps the three in step.
 */
export const PRODUCTION_NODE_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: '131072' };
export const PRODUCTION_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8'];
