import { DomainError, type ErrorCode } from '../domain/errors.js';

/**
 * Takes one of the plan's slots on the account stream (a token's, an alert rule's). Refused at
 * the plan's maximum (`limitCode`), it tries once more if `repair` freed a slot that a crash
 * left taken (a half-done create, or a delete whose release never came), so a crash can never
 * lock an account out; otherwise the refusal stands.
 */
export async function takePlanSlot(take: () => Promise<unknown>, limitCode: ErrorCode, repair: () => Promise<boolean>): Promise<void> {
  try {
    await take();
  } catch (e) {
    if (!(e instanceof DomainError && e.code === limitCode)) throw e;
    if (!(await repair())) throw e;
    await take();
  }
}
