import { useEffect, useState } from 'preact/hooks';

/**
 * Where the keyboard focus goes when the element holding it leaves the page. Chromium puts it on
 * <body>, so Tab starts again from the top and a screen reader loses its place. Two rules, one
 * for each way a control leaves with its action:
 * - a dialog or form gives it back to what opened it, when that is still there (`useFocusReturn`);
 * - otherwise it goes to the nearest element that held the removed one, can take the focus and is
 *   still in the page (a scrolling table, the page's content), or else to the page's content
 *   (`#main`): a row gone, a form closed, one page replaced by another (log in, log out)
 *   (`keepFocusInPage`, installed once).
 * A control that stays while its action runs keeps the focus by not being `disabled`: BusyButton.
 */

const focusLost = (): boolean => document.activeElement === null || document.activeElement === document.body;

/** Runs `then` once Preact has run the effects of what it just rendered (after the next frame, or 35 ms without one), so a component's own choice of focus comes first. */
function afterEffects(then: () => void): void {
  let started = false;
  const start = () => {
    if (started) return;
    started = true;
    setTimeout(then);
  };
  requestAnimationFrame(start);
  setTimeout(start, 50);
}

const canTakeFocus = (el: Element): el is HTMLElement =>
  el instanceof HTMLElement && (el.tabIndex >= 0 || el.hasAttribute('tabindex')) && !(el as HTMLButtonElement).disabled;

/** Installs the page-wide rule: the focus of a removed element goes to its nearest focusable container still in the page, or `#main`. Returns its removal. */
export function keepFocusInPage(): () => void {
  // The focused element and its ancestors as they were when it got the focus: once it is removed, its link to the page is gone.
  let focusedPath: Element[] = [];
  const onFocusIn = (e: FocusEvent) => {
    focusedPath = [];
    for (let el = e.target instanceof Element ? e.target : null; el; el = el.parentElement) focusedPath.push(el);
  };
  const restore = () => {
    const [focused, ...holders] = focusedPath;
    if (!focused || focused.isConnected || !focusLost()) return;
    const target = holders.find((el): el is HTMLElement => el.isConnected && canTakeFocus(el)) ?? document.getElementById('main');
    target?.focus();
  };
  const removals = new MutationObserver(() => {
    if (focusedPath[0] && !focusedPath[0].isConnected) afterEffects(restore);
  });
  document.addEventListener('focusin', onFocusIn);
  removals.observe(document.body, { childList: true, subtree: true });
  return () => {
    document.removeEventListener('focusin', onFocusIn);
    removals.disconnect();
  };
}

/**
 * For a dialog or a form that is unmounted rather than closed (so the browser gives nothing back):
 * when it leaves with the focus, the focus returns to what had it when it came, the button that
 * opened it, if that is still in the page. Call it before the effects that move the focus in.
 */
export function useFocusReturn(): void {
  // Read while the component first renders, before anything of it is in the page: an effect runs
  // after the paint, and by then a quick click or a test's typing may have moved the focus inside.
  const [opener] = useState(() => document.activeElement);
  useEffect(() => {
    return () =>
      queueMicrotask(() => {
        if (opener instanceof HTMLElement && opener !== document.body && opener.isConnected && focusLost()) opener.focus();
      });
  }, [opener]);
}
