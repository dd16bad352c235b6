import Fastify from 'fastify';
import type { OpenAPIV3_1 } from 'openapi-types';
import type { ApiDeps } from './deps.js';
import { managementApi } from './plugin.js';

/**
 * The management API's OpenAPI document without a running service: the routes are registered,
 * never called, so no store or dependency is needed (clients/typescript/generate.ts).
 */
export async function openApiDocument(): Promise<OpenAPIV3_1.Document> {
  const app = Fastify();
  await app.register(managementApi, {} as ApiDeps);
  const answer = await app.inject({ method: 'GET', url: '/api/v1/openapi.json' });
  await app.close();
  return answer.json<OpenAPIV3_1.Document>();
}
