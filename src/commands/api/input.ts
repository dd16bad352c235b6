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

/** `value` checked against `schema` at the edge; a mismatch says where it was (`query: Unrecognized key: "foo"`). */
export function parseInput<S extends z.ZodType>(part: InputPart, schema: S, value: unknown): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw new InvalidInput(part, result.error.issues);
  return result.data;
}
