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

/** An HTML answer as the OpenAPI document describes it (a page, not a problem body). */
export const HtmlPage = (description: string) => ({ description, content: { 'text/html': { schema: { type: 'string' } } } });
