import type { FastifySchemaCompiler } from 'fastify';
import type { z } from 'zod';
import { hasUnstorableText } from '../../domain/storableText.js';

/** The part of a request a value came from: validation messages name it. */
export type InputPart = 'body' | 'query' | 'params';

/** A request whose body, query or path parameters broke their schema (a 400 `validation_failed`). */
export class InvalidInput extends Error {
  constructor(
    readonly part: InputPart,
    readonly issues: readonly z.core.$ZodIssue[],
  ) {
    super(`invalid ${part}`);
    this.name = 'InvalidInput';
  }
}

/**
 * A field left out is "required", as the API's documentation says, not zod's "Invalid input:
 * expected string, received undefined"; every other message is zod's own.
 */
const MESSAGES: z.core.ParseContext<z.core.$ZodIssue> = {
  error: (issue) => (issue.code === 'invalid_type' && issue.input === undefined ? 'required' : undefined),
};

const REPEATED = 'must be given once, not repeated';

/**
 * The issues of a query, a parameter given more than once (`?start=…&start=…`, an array to the
 * schema) said to be repeated: the schema's own message, for a wrong value ("must be an ISO 8601
 * timestamp", "expected string, received array"), sent a client looking for a bad value.
 */
function inputIssues(part: InputPart, value: unknown, issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  const query = part === 'query' && typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : null;
  return issues.map((issue) => {
    const key = issue.path[0];
    const repeated = query !== null && issue.path.length === 1 && typeof key === 'string' && Object.hasOwn(query, key) && Array.isArray(query[key]);
    return repeated ? { code: 'custom', path: issue.path, message: REPEATED, input: query[key] } : issue;
  });
}

/** `value` checked against `schema` at the edge; a mismatch says where it was (`query: Unrecognized key: "foo"`). */
export function parseInput<S extends z.ZodType>(part: InputPart, schema: S, value: unknown): z.output<S> {
  const result = schema.safeParse(value, MESSAGES);
  if (!result.success) throw new InvalidInput(part, inputIssues(part, value, result.error.issues));
  return result.data;
}

/**
 * A handler's own check of one field (one the schema cannot judge alone: a chain this server
 * does not have, an end before the start) failed: the same 400 as a schema mismatch, its detail
 * (`query.chain: …`) and its `errors` entry alike.
 */
export function invalidField(part: InputPart, field: string, message: string): never {
  throw new InvalidInput(part, [{ code: 'custom', path: [field], message }]);
}

/**
 * The path of the first string in a JSON body, a value or a key, that holds unstorable text, or
 * null. Such a token name, appended to the event store, stopped the read models' projector on
 * PostgreSQL for every account (and LevelDB silently turned a lone surrogate into U+FFFD).
 */
export function unstorableTextPath(body: unknown): PropertyKey[] | null {
  interface Step {
    value: unknown;
    key: PropertyKey | null;
    parent: Step | null;
  }
  const pathOf = (step: Step): PropertyKey[] => {
    const path: PropertyKey[] = [];
    for (let s: Step | null = step; s?.key != null; s = s.parent) path.unshift(s.key);
    return path;
  };
  // A loop with parent links, not recursion or copied paths: JSON.parse takes nesting deeper than the call stack.
  const pending: Step[] = [{ value: body, key: null, parent: null }];
  for (let step = pending.pop(); step !== undefined; step = pending.pop()) {
    const { value } = step;
    if (typeof value === 'string' && hasUnstorableText(value)) return pathOf(step);
    if (typeof value !== 'object' || value === null) continue;
    const children = Object.entries(value).map(([key, item]): Step => ({ value: item, key: Array.isArray(value) ? Number(key) : key, parent: step }));
    const badKey = children.find((child) => hasUnstorableText(String(child.key)));
    if (badKey) return pathOf(badKey);
    // Last first onto the stack, so the first field is looked at first; no spread (a body may hold 500,000 items).
    for (let i = children.length - 1; i >= 0; i--) pending.push(children[i] as Step);
  }
  return null;
}

/** A body with text no store can hold (see unstorableTextPath) is refused before its schema is checked. */
export function refuseUnstorableText(body: unknown): void {
  const path = unstorableTextPath(body);
  if (path) throw new InvalidInput('body', [{ code: 'custom', path, message: 'must not contain U+0000 or unpaired surrogates' }]);
}

const PART_OF: Record<string, InputPart> = { body: 'body', querystring: 'query', params: 'params' };

/**
 * Fastify's validator for the zod schemas routes declare: a mismatch is the same InvalidInput a
 * handler's own check raises, issues and paths as zod gives them, so every 400 names its part
 * (`body: …`, `query.start: …`, `params.id: …`) in one shape. (The type provider's compiler
 * flattens paths into JSON pointers and drops which part failed.)
 */
export const zodValidatorCompiler: FastifySchemaCompiler<z.ZodType> = ({ schema, httpPart }) => {
  const part = PART_OF[httpPart ?? ''];
  if (!part) throw new Error(`no zod validation for the request's ${httpPart}`);
  return (value) => {
    const result = schema.safeParse(value, MESSAGES);
    return result.success ? { value: result.data } : { error: new InvalidInput(part, inputIssues(part, value, result.error.issues)) };
  };
};
