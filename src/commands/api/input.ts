import type { FastifySchemaCompiler } from 'fastify';
import type { z } from 'zod';

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

/** `value` checked against `schema` at the edge; a mismatch says where it was (`query: Unrecognized key: "foo"`). */
export function parseInput<S extends z.ZodType>(part: InputPart, schema: S, value: unknown): z.output<S> {
  const result = schema.safeParse(value, MESSAGES);
  if (!result.success) throw new InvalidInput(part, result.error.issues);
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
    return result.success ? { value: result.data } : { error: new InvalidInput(part, result.error.issues) };
  };
};
