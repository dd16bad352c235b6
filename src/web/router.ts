import { useEffect, useState } from 'preact/hooks';

/**
 * Hash routing (`/#/tokens`): the server only serves `/` and `/assets/*`, so no dashboard path
 * can ever shadow a chain route (`/<chain>/…`).
 */
export type Route =
  | { page: 'overview' }
  | { page: 'usage' }
  | { page: 'errors' }
  | { page: 'tokens' }
  | { page: 'token'; id: string }
  | { page: 'alerts' }
  | { page: 'exports' }
  | { page: 'access-tokens' }
  | { page: 'login' }
  | { page: 'signup' }
  | { page: 'not-found'; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, '').split('?')[0] || '/';
  const parts = path.split('/').filter(Boolean);
  const [first, second] = parts;
  if (!first) return { page: 'overview' };
  if (parts.length === 1) {
    switch (first) {
      case 'usage':
      case 'errors':
      case 'tokens':
      case 'alerts':
      case 'exports':
      case 'access-tokens':
      case 'login':
      case 'signup':
        return { page: first };
    }
  }
  if (first === 'tokens' && second && parts.length === 2) {
    // A typed or pasted address with a broken %-escape names no token: a page not found, not a crash.
    try {
      return { page: 'token', id: decodeURIComponent(second) };
    } catch {
      return { page: 'not-found', path };
    }
  }
  return { page: 'not-found', path };
}

export const hrefOf = (path: string): string => `#${path}`;

export function navigate(path: string): void {
  if (location.hash !== `#${path}`) location.hash = path;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}
