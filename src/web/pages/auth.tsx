import { useState } from 'preact/hooks';
import { type ApiClient, type ApiError, asApiError } from '../api.js';
import { BusyButton, Field, ProblemMessage } from '../components/ui.js';
import { fmtInt } from '../format.js';
import { hrefOf } from '../router.js';

export type AuthMode = 'login' | 'signup';

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

function validate(email: string, password: string, mode: AuthMode): { email?: string; password?: string } {
  const errors: { email?: string; password?: string } = {};
  if (!email.trim()) errors.email = 'Enter your email address.';
  else if (!EMAIL.test(email.trim())) errors.email = 'This is not an email address.';
  if (!password) errors.password = 'Enter your password.';
  else if (mode === 'signup' && password.length < 8) errors.password = 'Use at least 8 characters.';
  else if (password.length > 200) errors.password = 'Use at most 200 characters.';
  return errors;
}

/**
 * Log-in or sign-up. `lockedEmail` is set when a session ended mid-work: the owner logs back in
 * as the same account and the page underneath, with what was typed, carries on.
 */
export function AuthForm(props: { api: ApiClient; mode: AuthMode; lockedEmail?: string; onDone(): void | Promise<void> }) {
  const [email, setEmail] = useState(props.lockedEmail ?? '');
  const [password, setPassword] = useState('');
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<ApiError | null>(null);
  const errors = touched ? validate(email, password, props.mode) : {};
  const signup = props.mode === 'signup';

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (Object.keys(validate(email, password, props.mode)).length > 0) return;
    setBusy(true);
    setRefusal(null);
    try {
      await props.api.post(signup ? '/api/v1/auth/signup' : '/api/v1/auth/login', { email: email.trim(), password });
      await props.onDone();
    } catch (error) {
      setRefusal(asApiError(error));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="auth-form" onSubmit={submit} noValidate aria-label={signup ? 'Sign up' : 'Log in'}>
      <Field label="Email" error={errors.email}>
        {(c) => (
          <input
            {...c}
            type="email"
            autoComplete={signup ? 'email' : 'username'}
            value={email}
            readOnly={props.lockedEmail !== undefined}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
        )}
      </Field>
      <Field label="Password" error={errors.password} hint={signup ? 'At least 8 characters.' : undefined}>
        {(c) => (
          <input
            {...c}
            type="password"
            autoComplete={signup ? 'new-password' : 'current-password'}
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        )}
      </Field>
      <ProblemMessage error={refusal} />
      <BusyButton type="submit" class="button primary wide" busy={busy}>
        {busy ? 'Please wait…' : signup ? 'Create account' : 'Log in'}
      </BusyButton>
    </form>
  );
}

export function AuthPage(props: { api: ApiClient; mode: AuthMode; onDone(): Promise<void> }) {
  const signup = props.mode === 'signup';
  return (
    <main class="auth-page" id="main" tabIndex={-1}>
      <div class="auth-card">
        <p class="brand-big">
          <span class="brand-mark" aria-hidden="true">
            ◆
          </span>{' '}
          Chain Gateway
        </p>
        <h1>{signup ? 'Create your account' : 'Log in'}</h1>
        <p class="muted">{signup ? `Start on the Free plan: 2 tokens, ${fmtInt(100_000)} requests a month.` : 'Manage your API tokens, usage and alerts.'}</p>
        <AuthForm key={props.mode} api={props.api} mode={props.mode} onDone={props.onDone} />
        <p class="auth-switch">
          {signup ? (
            <>
              Already have an account? <a href={hrefOf('/login')}>Log in</a>
            </>
          ) : (
            <>
              New here? <a href={hrefOf('/signup')}>Create an account</a>
            </>
          )}
        </p>
      </div>
    </main>
  );
}
