// Binds a pending authorization request to the browser that started it, and the consent call to the
// page the gateway rendered for it:
//   - a random per-browser secret in an HttpOnly, SameSite=Lax cookie, its SHA-256 stored with each
//     request started in that browser (a leaked consent URL cannot be completed in another browser);
//   - a page token, HMAC-SHA-256(secret, requestId), embedded in the consent page and required by
//     POST /oauth/select in the X-Consent-Token header (only our page, read in that browser, has it).
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { newSecret } from '../platform/ids.ts';
import { BROWSER_COOKIE_LIFETIME_S } from './limits.ts';

const SECRET_PATTERN = /^[A-Za-z0-9_-]{43}$/;
export const CONSENT_TOKEN_HEADER = 'x-consent-token';

/** `__Host-` needs Secure, which browsers only keep over https; plain http (dev, loopback) drops the prefix. */
export function cookieName(baseUrl: string): string {
  return baseUrl.startsWith('https:') ? '__Host-acg-oauth-browser' : 'acg-oauth-browser';
}

/**
 * Whether a consent is remembered in a browser (`remembered-consent.ts`). Only a `__Host-` cookie is the gateway's
 * own: over plain http a cookie is shared with every port of the host, so any other service there reads it from a
 * visiting browser, or sets its own (found from outside: a page on another port of 127.0.0.1 planted a value, then
 * took codes for the owner who signed in). Live mode therefore remembers consents only over https, and over http
 * shows the consent page every time; dev mode keeps them (test credit, one developer's machine), as its own
 * documented convenience.
 */
export function remembersConsent(config: { mode: 'dev' | 'live'; baseUrl: string }): boolean {
  return config.mode === 'dev' || config.baseUrl.startsWith('https:');
}

export function readBrowserSecret(cookieHeader: string | undefined, baseUrl: string): string | undefined {
  const name = cookieName(baseUrl);
  for (const part of (cookieHeader ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    const value = rest.join('=');
    if (key === name && SECRET_PATTERN.test(value)) return value;
  }
  return undefined;
}

export function newBrowserSecret(): string {
  return newSecret();
}

export function setCookieHeader(baseUrl: string, secret: string): string {
  const secure = baseUrl.startsWith('https:') ? '; Secure' : '';
  return `${cookieName(baseUrl)}=${secret}; Path=/; Max-Age=${BROWSER_COOKIE_LIFETIME_S}; HttpOnly; SameSite=Lax${secure}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export function consentToken(browserSecret: string, requestId: string): string {
  return createHmac('sha256', browserSecret).update(requestId).digest('base64url');
}

function equalText(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/** True when the browser holds the secret the request was started with. */
export function browserMatches(browserSecret: string | undefined, browserHash: string): boolean {
  return browserSecret !== undefined && equalText(hashSecret(browserSecret), browserHash);
}

/** True when the caller holds both the browser secret and the page token derived from it. */
export function consentBindingHolds(browserSecret: string | undefined, browserHash: string, requestId: string, presentedToken: string | undefined): boolean {
  if (!browserSecret || presentedToken === undefined || !browserMatches(browserSecret, browserHash)) return false;
  return equalText(consentToken(browserSecret, requestId), presentedToken);
}
