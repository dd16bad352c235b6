import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportRow } from '../../src/commands/api/exports/rows.js';
import { encodeRawRow, encodeUsageCall, type UsageRecord } from '../../src/domain/usage.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { RangeOptions, ReadModelStore } from '../../src/infra/readmodels/port.js';
import { PostgresReadModelStore } from '../../src/infra/readmodels/postgres.js';
import { EXPORT_PAGE_MAX_DOCS, EXPORT_PAGE_ROWS, UsageQueries } from '../../src/projections/metricsQueries.js';
import { RAW_ROWS_PER_DOC, requestBlockKey, USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { createTestDatabase, postgresUnavailable } from '../support/postgres.js';
import { usageCall } from '../support/usageCall.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'export-pages-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const HOUR = '2026-11-27T10';
const call = (i: number): UsageRecord =>
  usageCall('acc', 'tok', new Date(Date.parse(`${HOUR}:00:00.000Z`) + i).toISOString(), {
    requestId: `req-${i}`,
    upstream: 'eth-1',
    totalMs: 1,
    upstreamMs: 0.5,
  });

/** Stores `calls` raw rows, `perDoc` to a document as the usage projection writes them, and exports them, counting the reads. */
async function exportOf(name: string, calls: number, perDoc: number): Promise<{ ids: string[]; reads: number }> {
  const store = await LevelReadModelStore.open(join(dir, name));
  try {
    const writes = [];
    for (let first = 0; first < calls; first += perDoc) {
      const doc: Record<number, unknown> = {};
      for (let slot = first; slot < Math.min(calls, first + perDoc); slot++) doc[slot - first] = encodeUsageCall(call(slot));
      writes.push({ op: 'put' as const, collection: USAGE_METRICS.requestBlocks, key: requestBlockKey('acc', HOUR, first), doc });
    }
    await store.write(writes);
    let reads = 0;
    const range = store.range.bind(store);
    store.range = ((collection: string, options?: RangeOptions) => {
      if (collection === USAGE_METRICS.requestBlocks) reads++;
      return range(collection, options);
    }) as typeof store.range;
    const ids: string[] = [];
    const scope = {
      accountId: 'acc',
      start: Date.parse(`${HOUR}:00:00.000Z`),
      end: Date.parse(`${HOUR}:00:00.000Z`) + 3_600_000,
      granularity: 'hour' as const,
      chain: null,
    };
    for await (const page of new UsageQueries(store).requestRows(scope)) {
      expect(page.length).toBeLessThanOrEqual(EXPORT_PAGE_ROWS);
      for (const row of page) ids.push(row.requestId);
    }
    return { ids, reads };
  } finally {
    await store.close();
  }
}

describe('an export reads pages of at most about EXPORT_PAGE_ROWS rows, and as many as its documents allow', () => {
  const CALLS = 5_000;
  const expected = Array.from({ length: CALLS }, (_, i) => `req-${i}`);
  const pages = Math.ceil(CALLS / EXPORT_PAGE_ROWS);

  it('from documents of one row each (an account among many, or one-call events of old logs)', async () => {
    const { ids, reads } = await exportOf('one-row', CALLS, 1);
    expect(ids).toEqual(expected);
    // The first read asks for a page of full documents, then for EXPORT_PAGE_MAX_DOCS: not 16 a read.
    expect(reads).toBeLessThanOrEqual(Math.ceil(CALLS / EXPORT_PAGE_MAX_DOCS) + 2);
  });

  it('from full documents (a busy account)', async () => {
    const { ids, reads } = await exportOf('full', CALLS, RAW_ROWS_PER_DOC);
    expect(ids).toEqual(expected);
    expect(reads).toBeLessThanOrEqual(pages + 1);
    expect(reads).toBeGreaterThanOrEqual(pages);
  });
});

/** Raw rows as earlier versions wrote them (the call's fields only) and as written now, in one store, exported. */
async function exportedVersions(store: ReadModelStore): Promise<Array<[string, number, boolean, string | null]>> {
  const old = [200, 429, 403, 400].map((status, i) => encodeUsageCall({ ...call(i), status }));
  // Written now: an invalid batch member (200, not charged) and a cache hit.
  const now = [encodeRawRow({ ...call(4), charged: false }), encodeRawRow({ ...call(5), charged: true, cache: 'hit' })];
  await store.write([
    { op: 'put', collection: USAGE_METRICS.requestBlocks, key: requestBlockKey('acc', HOUR, 0), doc: { ...old } },
    { op: 'put', collection: USAGE_METRICS.requestBlocks, key: requestBlockKey('acc', HOUR, 4), doc: { ...now } },
  ]);
  const start = Date.parse(`${HOUR}:00:00.000Z`);
  const rows: Array<[string, number, boolean, string | null]> = [];
  for await (const page of new UsageQueries(store).requestRows({ accountId: 'acc', start, end: start + 3_600_000, granularity: 'hour', chain: null }))
    for (const r of page.map(exportRow)) rows.push([r.request_id, r.status, r.charged, r.cache]);
  return rows;
}

/** Charged as usedQuota tells from the status for rows that never said (refusals 401, 403, 429 not charged); cache empty. */
const EXPORTED_VERSIONS = [
  ['req-0', 200, true, null],
  ['req-1', 429, false, null],
  ['req-2', 403, false, null],
  ['req-3', 400, true, null],
  ['req-4', 200, false, null],
  ['req-5', 200, true, 'hit'],
];

const pgUnavailable = await postgresUnavailable();

describe('raw rows of earlier versions, without charged and cache, export beside the rows written now', () => {
  it('from LevelDB', async () => {
    const store = await LevelReadModelStore.open(join(dir, 'versions'));
    try {
      expect(await exportedVersions(store)).toEqual(EXPORTED_VERSIONS);
    } finally {
      await store.close();
    }
  });

  it.skipIf(pgUnavailable !== null)(`from PostgreSQL${pgUnavailable ? ` (skipped: ${pgUnavailable})` : ''}`, async () => {
    const db = await createTestDatabase();
    const store = await PostgresReadModelStore.open(db.url);
    try {
      expect(await exportedVersions(store)).toEqual(EXPORTED_VERSIONS);
    } finally {
      await store.close();
      await db.drop();
    }
  });
});
