// Paths under /console, in the address bar: history.pushState for links inside the console, popstate for
// back and forward. Every path answers the same shell on a reload, so any page can be bookmarked.
import { useEffect, useState } from 'preact/hooks';

const CHANGE = 'acg-console-navigate';

export function navigate(path: string): void {
  if (path === location.pathname + location.search) return;
  history.pushState(null, '', path);
  window.dispatchEvent(new Event(CHANGE));
}

/** The current path, kept current. */
export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    window.addEventListener('popstate', update);
    window.addEventListener(CHANGE, update);
    return () => {
      window.removeEventListener('popstate', update);
      window.removeEventListener(CHANGE, update);
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
