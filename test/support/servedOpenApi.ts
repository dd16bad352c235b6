import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import ajvFormats from 'ajv-formats';
import { expect } from 'vitest';

/** A schema as the document describes it: enough to read descriptions. */
export interface Described {
  description?: string;
  properties?: Record<string, Described>;
}

export interface ServedDocument {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema?: Described }> }> }>>;
  components: { schemas: Record<string, Described> };
}

const COMPONENTS = 'https://chain-gateway.test/components';

/**
 * The OpenAPI document as the service served it (`text`), and `conforms`: an answer (to a GET
 * unless `method` names another) must be one the document gives for its path, status and media type (ajv, JSON Schema 2020-12 as
 * OpenAPI 3.1 has it; each schema compiled once).
 */
export function servedOpenApi(text: string): {
  doc: ServedDocument;
  conforms(path: string, status: number, mediaType: string, body: unknown, method?: string): void;
} {
  const doc = JSON.parse(text.replaceAll('"#/components/schemas/', `"${COMPONENTS}#/$defs/`)) as ServedDocument;
  if (!doc.components) throw new Error(`openapi.json: ${text.slice(0, 300)}`);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajvFormats.default(ajv);
  ajv.addFormat('binary', true);
  ajv.addSchema({ $id: COMPONENTS, $defs: doc.components.schemas });
  const validators = new Map<string, ValidateFunction>();
  return {
    doc,
    conforms(path, status, mediaType, body, method = 'get') {
      const response = doc.paths[path]?.[method]?.responses[String(status)];
      expect(response, `${method} ${path} does not document ${status}`).toBeDefined();
      const schema = response?.content?.[mediaType]?.schema;
      expect(schema, `${path} ${status} has no ${mediaType} schema`).toBeDefined();
      const key = `${method} ${path} ${status} ${mediaType}`;
      let validate = validators.get(key);
      if (!validate) {
        validate = ajv.compile(schema as object);
        validators.set(key, validate);
      }
      expect(validate(body), `${key}: ${ajv.errorsText(validate.errors)}`).toBe(true);
    },
  };
}
