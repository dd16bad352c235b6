import { expect } from 'vitest';
import type { Decider } from '../../src/domain/decider.js';
import { DomainError, type ErrorCode } from '../../src/domain/errors.js';

/** given events / when command / then events (or then error), as in emmett's DeciderSpecification. */
export function deciderSpec<S, C, E>(decider: Decider<S, C, E>) {
  return {
    given: (events: E[]) => ({
      when: (command: C) => {
        const run = () => decider.decide(command, events.reduce(decider.evolve, decider.initialState()));
        return {
          // biome-ignore lint/suspicious/noThenProperty: given/when/then is the pattern's vocabulary; this object is never awaited
          then: (expected: E[]) => expect(run()).toEqual(expected),
          thenNothing: () => expect(run()).toEqual([]),
          thenError: (code: ErrorCode) => {
            let caught: unknown;
            try {
              run();
            } catch (e) {
              caught = e;
            }
            expect(caught).toBeInstanceOf(DomainError);
            expect((caught as DomainError).code).toBe(code);
          },
        };
      },
    }),
  };
}
