// How this package's calls to the gateway retry, for the agent's authorizations and the merchant's verify
// and settle alike: a retry reuses what makes the request the same one at the gateway (the authorization's
// idempotency key, the settlement's jti), so it can only get the first run's answer, never a second run.
import type { Problem } from './errors.js';

/** Attempts per call, the first included. */
export const ATTEMPTS_DEFAULT = 4;
/** The longest Retry-After honoured (seconds); a longer one is waited this long. */
export const RETRY_AFTER_S_MAX = 30;
/** How long one call may go on retrying, from its first attempt: no retry is made whose wait would end past it. */
export const RETRY_WINDOW_MS_DEFAULT = 30_000;

/** The wait before retry n (0-based) when the gateway named none: 250 ms · 2ⁿ with jitter, at most 5 s. */
export function defaultBackoffMs(attempt: number): number {
  const ceilingMs = Math.min(5_000, 250 * 2 ** attempt);
  return ceilingMs / 2 + Math.random() * (ceilingMs / 2);
}

/** A status worth retrying as the same request: it may not have run, or ran and is replayed. */
export function retryable(status: number, problem: Problem | undefined): boolean {
  return status === 429 || status >= 500 || (status === 409 && problem?.code === 'idempotency_key_in_use');
}

/** The answer's Retry-After in seconds (delay-seconds, as the gateway sends it), as it said it. */
export function retryAfterSOf(headers: Headers): number | undefined {
  const text = headers.get('retry-after');
  return text !== null && /^\s*\d{1,9}\s*$/.test(text) ? Number(text) : undefined;
}

/** The wait before the next attempt: the gateway's Retry-After (at most {@link RETRY_AFTER_S_MAX}), else the backoff. */
export function waitMsBefore(attempt: number, retryAfterS: number | undefined, backoffMs: (attempt: number) => number): number {
  return retryAfterS !== undefined ? Math.min(retryAfterS, RETRY_AFTER_S_MAX) * 1000 : backoffMs(attempt - 1);
}

/** A 3xx: the gateway (or something in front of it) sent the call elsewhere, which a retry will not change. */
export function isRedirect(status: number): boolean {
  return status >= 300 && status < 400;
}

/** What a redirect said, for the refusal: the status and where it pointed. */
export function redirectDetail(response: Response): string {
  return `${response.status} to ${response.headers.get('location') ?? 'nowhere named'}: set the gateway URL to the address that answers; the credential is never sent on`;
}

/** The answer's problem body (RFC 9457) with its status, or undefined when the body is not a JSON object. */
export async function problemOf(response: Response): Promise<Problem | undefined> {
  try {
    const body = (await response.json()) as unknown;
    return typeof body === 'object' && body !== null && !Array.isArray(body) ? { ...(body as Problem), status: response.status } : undefined;
  } catch {
    return undefined;
  }
}

/** Waits ms milliseconds. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
