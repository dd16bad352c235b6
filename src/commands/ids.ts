import { randomBase62 } from '../domain/tokenFormat.js';

/** Ids carry their kind (`acc_`, `tok_`, `key_`) so a log line or a URL says what it names. */
export const newId = {
  account: () => `acc_${randomBase62(16)}`,
  apiToken: () => `tok_${randomBase62(16)}`,
  accessToken: () => `key_${randomBase62(16)}`,
};

export const ID_PATTERN = /^(acc|tok|key)_[0-9A-Za-z]{16}$/;
