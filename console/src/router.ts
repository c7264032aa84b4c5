// Paths under /console, in the address bar: history.pushState for links inside the console, popstate for
// back and forward. Every path answers the same shell on a reload, so any page can be bookmarked. A page with
// changes not saved (the mandate form) asks before any of these leaves it, and so does the browser before a
// reload, a closed tab or a sign-in that leaves the page (`useLeaveGuard`).
import { useEffect, useRef, useState } from 'preact/hooks';

const CHANGE = 'acg-console-navigate';

/** The questions of the pages that have changes not saved, asked before the console leaves them. */
const leaveQuestions = new Set<() => string>();

/** True when nothing is unsaved, or the person confirmed each question (also before signing out). */
export function mayLeave(): boolean {
  for (const question of leaveQuestions) if (!window.confirm(question())) return false;
  return true;
}

/**
 * While `question` is set (the page has changes not saved), leaving asks it: a console link, back and forward
 * with `window.confirm`, and a reload, a closed tab or a sign-in redirect with the browser's own question
 * (`beforeunload`, whose text browsers no longer show).
 */
export function useLeaveGuard(question: string | undefined): void {
  useEffect(() => {
    if (question === undefined) return;
    const ask = () => question;
    const onBeforeUnload = (event: BeforeUnloadEvent) => event.preventDefault();
    leaveQuestions.add(ask);
    window.addEventListener('beforeunload', onBeforeUnload);
    return () => {
      leaveQuestions.delete(ask);
      window.removeEventListener('beforeunload', onBeforeUnload);
    };
  }, [question]);
}

export function navigate(path: string): void {
  if (path === location.pathname + location.search) return;
  if (!mayLeave()) return;
  history.pushState(null, '', path);
  window.dispatchEvent(new Event(CHANGE));
}

/** The current path, kept current. Back or forward away from changes not saved, declined, puts the path back. */
export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  const shown = useRef(path);
  useEffect(() => {
    const show = () => {
      shown.current = location.pathname;
      setPath(location.pathname);
    };
    // navigate() asked already; back and forward have moved the address bar before anyone could ask.
    const onPopState = () => {
      if (location.pathname !== shown.current && !mayLeave()) history.pushState(null, '', shown.current);
      else show();
    };
    window.addEventListener('popstate', onPopState);
    window.addEventListener(CHANGE, show);
    return () => {
      window.removeEventListener('popstate', onPopState);
      window.removeEventListener(CHANGE, show);
    };
  }, []);
  return path;
}

/** A click on a console link stays in the page (a modified click still opens a new tab). */
export function followLink(event: MouseEvent): void {
  const anchor = (event.target as Element | null)?.closest('a');
  if (!anchor || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(anchor.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/console') || anchor.target || anchor.hasAttribute('download')) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
}
