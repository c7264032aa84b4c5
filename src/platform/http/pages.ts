// What every HTML page the gateway serves shares (the OAuth consent and error pages, the top-up approval
// page): escaping, a per-response CSP nonce, and the headers that forbid framing, referrers and caching.
import { newSecret } from '../ids.ts';

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A per-response nonce for the page's one inline script and style (CSP `nonce-…`). */
export function newNonce(): string {
  return newSecret('', { bytes: 16, encoding: 'base64' });
}

/** Headers for every page: no framing (clickjacking), no referrer (codes and ids stay private), no caching. */
export function pageHeaders(nonce: string): Record<string, string> {
  return {
    'content-type': 'text/html; charset=utf-8',
    'content-security-policy': [
      "default-src 'none'",
      `script-src 'nonce-${nonce}'`,
      `style-src 'nonce-${nonce}'`,
      "connect-src 'self'",
      "img-src 'self'",
      "form-action 'none'",
      "base-uri 'none'",
      "frame-ancestors 'none'",
    ].join('; '),
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-store',
    pragma: 'no-cache',
  };
}

/**
 * The page of a refusal the platform gives on a route whose document declares that status as a page (the text
 * guard's 400 on a consent or approval page): what was refused, in the words of the problem or OAuth body it would
 * otherwise be, and never what the request carried.
 */
export function refusalPage(nonce: string, refusal: { status: number; code: string; detail: string }): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>This page cannot be shown · Agent Credit Gateway</title>
<style nonce="${nonce}">body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:40rem;padding:0 1rem;line-height:1.5;overflow-wrap:anywhere}.muted{color:#555}</style></head>
<body><main><h1>This page cannot be shown</h1>
<p id="error" data-status="${refusal.status}" data-error="${escapeHtml(refusal.code)}"><code>${escapeHtml(refusal.code)}</code>: ${escapeHtml(refusal.detail)}</p>
<p class="muted">${
    refusal.status === 429 || refusal.status >= 500
      ? 'Nothing is wrong with this link: try again shortly (reload this page).'
      : 'Check that the address was copied whole, or start again from the application or console that sent you here.'
  }</p></main></body></html>`;
}

/**
 * The paths of the pages for people (those whose document names a `text/html` answer): the landing page, the console
 * (not its static files), the OAuth authorize and consent pages, the approval pages and the API reference. The front
 * door answers these in HTML while the gateway starts or stops, as their document says (found from outside: a JSON
 * body in a browser); `test/http-surface/openapi-document.test.ts` holds this list to the document.
 */
const PAGE_PATH = /^\/(?:console(?:\/(?!static\/)[^?]*)?|oauth\/(?:authorize|consent)|payments\/(?:topups|purchases)\/[^/]+|docs(?:\/(?:errors)?)?)?$/;

export function isPagePath(path: string): boolean {
  return PAGE_PATH.test(path);
}

/** An HTML answer as the OpenAPI document describes it (a page, not a problem body). */
export const HtmlPage = (description: string) => ({ description, content: { 'text/html': { schema: { type: 'string' } } } });
