/**
 * The environment `npm start` (package.json) and the Docker image give the service besides its
 * configuration (docs/operations.md, Memory): the benchmarks start the gateway with it, and
 * test/unit/production-env.test.ts keeps the three in step.
 */
export const PRODUCTION_NODE_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };
