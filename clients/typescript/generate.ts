/**
 * `npm run generate:client`: writes this API's OpenAPI document (openapi.json) and the TypeScript
 * types made from it by openapi-typescript (schema.d.ts), for openapi-fetch or any client.
 * openapi-typescript needs TypeScript 5's compiler API, which this project's TypeScript 7 does
 * not have: npx runs both, pinned, apart from the project's packages.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openApiDocument } from '../../src/commands/api/openApiDocument.js';

const here = import.meta.dirname;
const json = join(here, 'openapi.json');
const types = join(here, 'schema.d.ts');

const document = `${JSON.stringify(await openApiDocument(), null, 2)}\n`;
writeFileSync(json, document);
execFileSync('npx', ['--yes', '-p', 'openapi-typescript@7.13.0', '-p', 'typescript@5.9.3', 'openapi-typescript', json, '-o', types], { stdio: 'inherit' });
// The test that fails on a stale client compares this with the committed openapi.json.
const stamp = `// Generated from openapi.json (sha256 ${createHash('sha256').update(document).digest('hex')}) by npm run generate:client.\n`;
writeFileSync(types, stamp + readFileSync(types, 'utf8'));
