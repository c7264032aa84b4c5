// Paths under /console, in the address bar: history.pushState for links inside the console, popstate for
// back and forward. Every path answers the same shell on a reload, so any page can be bookmarked. A page with
// changes not saved (the mandate form) asks before any of these leaves it, and so does the browser before a
// reload, a closed tab or a sign-in that leaves the page (`useLeaveGuard`). When the sign-in ends under such a page
// (the console could not renew it by itself), its draft is kept in this tab until the owner is signed in again
// (`keepUnsaved`, `takeKept`).
import { useEffect, useRef, useState } from 'preact/hooks';

const CHANGE = 'acg-console-navigate';

/** A form's draft, named by the form and what it edits (`mandate:agt_…`), that a page can take back (`takeKept`). */
export interface Keepable {
  form: string;
  draft: unknown;
}

/** The pages that have changes not saved: the question asked before the console leaves them, and what they keep. */
const unsavedPages = new Set<{ question: () => string; keep: () => Keepable | undefined }>();

/** True when nothing is unsaved, or the person confirmed each question (also before signing out). */
export function mayLeave(): boolean {
  for (const page of unsavedPages) if (!window.confirm(page.question())) return false;
  return true;
}

/**
 * While `question` is set (the page has changes not saved), leaving asks it: a console link, back and forward
 * with `window.confirm`, and a reload, a closed tab or a sign-in redirect with the browser's own question
 * (`beforeunload`, whose text browsers no longer show). `keep`: the draft, kept if the sign-in ends under the page
 * (never a secret shown once: a page showing one passes none).
 */
export function useLeaveGuard(question: string | undefined, keep?: Keepable): void {
  const latest = useRef(keep);
  latest.current = keep;
  useEffect(() => {
    if (question === undefined) return;
    const page = { question: () => question, keep: () => latest.current };
    const onBeforeUnload = (event: BeforeUnloadEvent) => event.preventDefault();
    unsavedPages.add(page);
    window.addEventListener('beforeunload', onBeforeUnload);
    return () => {
      unsavedPages.delete(page);
      window.removeEventListener('beforeunload', onBeforeUnload);
    };
  }, [question]);
}

const KEPT_KEY = 'acg-console-unsaved';
/** How long a kept draft waits for its owner's next sign-in in this tab; an older one is dropped unread. */
const KEPT_FOR_MS = 60 * 60_000;

interface Kept {
  ownerId: string;
  keptAtMs: number;
  drafts: Record<string, unknown>;
}

/** The drafts kept in this tab for `ownerId` and still young; any other kept drafts are removed as they are read. */
function keptFor(ownerId: string): Kept['drafts'] {
  let kept: Partial<Kept> | null = null;
  try {
    kept = JSON.parse(sessionStorage.getItem(KEPT_KEY) ?? 'null') as Partial<Kept> | null;
  } catch {
    kept = {}; // unreadable (storage refused, or not JSON): nothing is kept
  }
  if (kept?.ownerId === ownerId && typeof kept.keptAtMs === 'number' && Date.now() - kept.keptAtMs < KEPT_FOR_MS && typeof kept.drafts === 'object' && kept.drafts !== null) return kept.drafts;
  if (kept !== null) storeKept(ownerId, {});
  return {};
}

/** Stores the drafts (none: removes the entry); storage full or refused keeps nothing, and the sign-in screen says nothing. */
function storeKept(ownerId: string, drafts: Kept['drafts']): void {
  try {
    if (Object.keys(drafts).length === 0) sessionStorage.removeItem(KEPT_KEY);
    else sessionStorage.setItem(KEPT_KEY, JSON.stringify({ ownerId, keptAtMs: Date.now(), drafts } satisfies Kept));
  } catch {
    // Nothing kept.
  }
}

/**
 * The sign-in ended under the pages (the console could not renew it by itself, so the next sign-in leaves the page):
 * the drafts of those with changes not saved are kept in this tab's sessionStorage, for this owner, until the page
 * that edits them is shown again signed in (`takeKept`), an hour passes, or the owner signs out.
 */
export function keepUnsaved(ownerId: string): void {
  const drafts = keptFor(ownerId);
  for (const page of unsavedPages) {
    const kept = page.keep();
    if (kept !== undefined) drafts[kept.form] = kept.draft;
  }
  storeKept(ownerId, drafts);
}

/** The draft kept for `form` of this owner, given once (removed as it is read). */
export function takeKept(ownerId: string, form: string): unknown {
  const drafts = keptFor(ownerId);
  if (!(form in drafts)) return undefined;
  const draft = drafts[form];
  delete drafts[form];
  storeKept(ownerId, drafts);
  return draft;
}

/** Whether drafts are kept in this tab for the next sign-in (the sign-in screen says so). */
export function keptAny(): boolean {
  try {
    return sessionStorage.getItem(KEPT_KEY) !== null;
  } catch {
    return false;
  }
}

/** Forgets every kept draft: the owner signed out, or another owner signed in (`ownerId`: keep only theirs). */
export function forgetKept(ownerId?: string): void {
  if (ownerId !== undefined) keptFor(ownerId);
  else storeKept('', {});
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
