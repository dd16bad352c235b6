import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Account } from '../api/types.js';
import { ApiClient, type ApiError, asApiError } from './api.js';
import { BusyButton, ProblemMessage } from './components/ui.js';
import { useFocusReturn } from './focus.js';
import { type Filters, FiltersContext, initialFilters, type Session, SessionContext } from './hooks.js';
import { AccessTokensPage } from './pages/accessTokens.js';
import { AlertsPage } from './pages/alerts/alertsPage.js';
import { AuthForm, AuthPage } from './pages/auth.js';
import { ErrorsPage } from './pages/errors.js';
import { ExportsPage } from './pages/exports.js';
import { OverviewPage } from './pages/overview.js';
import { TokenDetailPage } from './pages/tokenDetail.js';
import { TokensPage } from './pages/tokens.js';
import { UsagePage } from './pages/usage.js';
import { hrefOf, navigate, type Route, useRoute } from './router.js';

/** Not a credential: only spares a first visit the 401 of asking who is logged in. */
const SIGNED_IN_HINT = 'gateway.signed-in';
const hint = {
  get: () => localStorage.getItem(SIGNED_IN_HINT) === '1',
  set: () => localStorage.setItem(SIGNED_IN_HINT, '1'),
  clear: () => localStorage.removeItem(SIGNED_IN_HINT),
};

type Phase = 'checking' | 'anonymous' | 'in';

const NAV: { path: string; label: string; pages: Route['page'][] }[] = [
  { path: '/', label: 'Overview', pages: ['overview'] },
  { path: '/usage', label: 'Usage', pages: ['usage'] },
  { path: '/errors', label: 'Errors', pages: ['errors'] },
  { path: '/tokens', label: 'Tokens', pages: ['tokens', 'token'] },
  { path: '/alerts', label: 'Alerts', pages: ['alerts'] },
  { path: '/exports', label: 'Exports', pages: ['exports'] },
  { path: '/access-tokens', label: 'Access tokens', pages: ['access-tokens'] },
];

export function App() {
  const route = useRoute();
  const [phase, setPhase] = useState<Phase>(() => (hint.get() ? 'checking' : 'anonymous'));
  const [account, setAccount] = useState<Account | null>(null);
  const [sessionLost, setSessionLost] = useState(false);
  const [loggingOut, setLoggingOut] = useState(false);
  const [logoutError, setLogoutError] = useState<ApiError | null>(null);
  const [filters, setFilters] = useState<Filters>(() => initialFilters());
  const phaseRef = useRef(phase);
  phaseRef.current = phase;
  const waiting = useRef<((loggedIn: boolean) => void)[]>([]);

  // A 401 while logged in opens the log-in dialog over the page; the calls wait for it.
  const api = useMemo(
    () =>
      new ApiClient(() => {
        if (phaseRef.current !== 'in') return Promise.resolve(false);
        setSessionLost(true);
        return new Promise<boolean>((resolve) => waiting.current.push(resolve));
      }),
    [],
  );

  const refreshAccount = useCallback(async () => {
    setAccount(await api.get<Account>('/api/v1/account'));
  }, [api]);

  useEffect(() => {
    if (phase !== 'checking') return;
    api.get<Account>('/api/v1/account').then(
      (a) => {
        setAccount(a);
        setPhase('in');
      },
      () => {
        hint.clear();
        setPhase('anonymous');
      },
    );
  }, [api, phase]);

  useEffect(() => {
    if (phase === 'in' && (route.page === 'login' || route.page === 'signup')) navigate('/');
  }, [phase, route.page]);

  useEffect(() => {
    const page = phase !== 'in' ? (route.page === 'signup' ? 'Sign up' : 'Log in') : NAV.find((n) => n.pages.includes(route.page))?.label;
    document.title = page ? `${page} · Chain Gateway` : 'Chain Gateway';
  }, [phase, route.page]);

  const loggedIn = async () => {
    hint.set();
    setAccount(await api.get<Account>('/api/v1/account'));
    setPhase('in');
  };

  const loggedInAgain = async () => {
    setSessionLost(false);
    for (const resolve of waiting.current.splice(0)) resolve(true);
    await refreshAccount().catch(() => undefined);
  };

  const logout = useCallback(async () => {
    setLoggingOut(true);
    setLogoutError(null);
    try {
      await api.post('/api/v1/auth/logout');
    } catch (error) {
      // The server did not end the session: it still works in this browser, so the page must not look logged out.
      setLogoutError(asApiError(error));
      return;
    } finally {
      setLoggingOut(false);
    }
    hint.clear();
    for (const resolve of waiting.current.splice(0)) resolve(false);
    setSessionLost(false);
    setAccount(null);
    setPhase('anonymous');
    navigate('/login');
  }, [api]);
  const logoutProblem = logoutError && `Not logged out: ${logoutError.message}`;

  if (phase === 'checking') {
    return (
      <main class="splash" id="main" aria-busy="true">
        Loading…
      </main>
    );
  }
  if (phase === 'anonymous' || !account) return <AuthPage api={api} mode={route.page === 'signup' ? 'signup' : 'login'} onDone={loggedIn} />;

  const session: Session = { api, account, refreshAccount, logout };
  return (
    <SessionContext.Provider value={session}>
      <FiltersContext.Provider value={[filters, setFilters]}>
        {/* A button, not a link: with hash routing, "#main" would be a route. */}
        <button type="button" class="skip-link" onClick={() => document.getElementById('main')?.focus()}>
          Skip to content
        </button>
        <header class="top">
          <a class="brand" href={hrefOf('/')}>
            <span class="brand-mark" aria-hidden="true">
              ◆
            </span>{' '}
            Chain Gateway
          </a>
          <div class="who">
            <span class="email" title={account.email}>
              {account.email}
            </span>
            <span class={`badge plan-${account.plan.id}`} data-testid="plan-badge">
              {account.plan.name}
            </span>
            <BusyButton type="button" class="button small" onClick={() => void logout()} busy={loggingOut}>
              {loggingOut ? 'Logging out…' : 'Log out'}
            </BusyButton>
          </div>
          <nav aria-label="Dashboard">
            <ul>
              {NAV.map((n) => (
                <li key={n.path}>
                  <a href={hrefOf(n.path)} aria-current={n.pages.includes(route.page) ? 'page' : undefined}>
                    {n.label}
                  </a>
                </li>
              ))}
            </ul>
          </nav>
        </header>
        {logoutProblem && (
          <div class="logout-problem">
            <ProblemMessage error={logoutProblem} />
          </div>
        )}
        <main id="main" tabIndex={-1}>
          <Page route={route} />
        </main>
        {sessionLost && (
          <SessionLostDialog api={api} email={account.email} onDone={loggedInAgain} onLogout={logout} loggingOut={loggingOut} logoutProblem={logoutProblem} />
        )}
      </FiltersContext.Provider>
    </SessionContext.Provider>
  );
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case 'overview':
    case 'login':
    case 'signup':
      return <OverviewPage />;
    case 'usage':
      return <UsagePage />;
    case 'errors':
      return <ErrorsPage />;
    case 'tokens':
      return <TokensPage />;
    case 'token':
      return <TokenDetailPage id={route.id} />;
    case 'alerts':
      return <AlertsPage />;
    case 'exports':
      return <ExportsPage />;
    case 'access-tokens':
      return <AccessTokensPage />;
    case 'not-found':
      return (
        <section class="panel">
          <h1>Page not found</h1>
          <p>
            Nothing lives at <code>{route.path}</code>. <a href={hrefOf('/')}>Go to the overview</a>.
          </p>
        </section>
      );
  }
}

/** The session ended mid-work: log in again in a dialog, the page beneath keeps its state. */
function SessionLostDialog(props: {
  api: ApiClient;
  email: string;
  onDone(): Promise<void>;
  onLogout(): Promise<void>;
  loggingOut: boolean;
  logoutProblem: string | null;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  // Logged in again, the focus goes back to where the owner was: the control whose call the dialog interrupted.
  useFocusReturn();
  useEffect(() => {
    ref.current?.showModal();
    // The email is known: the password is what to type.
    ref.current?.querySelector<HTMLInputElement>('input[type="password"]')?.focus();
  }, []);
  return (
    <dialog ref={ref} class="dialog" aria-labelledby="session-lost-title" onCancel={(e) => e.preventDefault()} data-testid="session-lost">
      <h2 id="session-lost-title">Your session has ended</h2>
      <p>Log in again to carry on. What you were doing stays as it is and continues after you log in.</p>
      <AuthForm api={props.api} mode="login" lockedEmail={props.email} onDone={props.onDone} />
      <p class="auth-switch">
        Not you?{' '}
        <BusyButton type="button" class="link-button" onClick={() => void props.onLogout()} busy={props.loggingOut}>
          {props.loggingOut ? 'Logging out…' : 'Log out'}
        </BusyButton>
      </p>
      <ProblemMessage error={props.logoutProblem} />
    </dialog>
  );
}
