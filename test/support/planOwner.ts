import { ADMIN_TOKEN, owner, type TestApp } from './testApp.js';

/** A new owner (as `owner` gives them) whose account the admin API put on `plan`. */
export async function ownerOn(t: Pick<TestApp, 'app'>, plan: string) {
  const o = await owner(t.app);
  const res = await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan },
  });
  if (res.statusCode !== 200) throw new Error(`plan ${plan} not set: ${res.statusCode} ${res.body}`);
  return o;
}

/** The id of a new API token of the owner's, made with `payload` (at least its name). */
export async function createToken(
  t: Pick<TestApp, 'app'>,
  o: { auth: Record<string, string> },
  payload: { name: string } & Record<string, unknown>,
): Promise<string> {
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload });
  if (res.statusCode !== 201) throw new Error(`token not created: ${res.statusCode} ${res.body}`);
  return res.json().id as string;
}
