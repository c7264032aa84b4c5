// The console's only way to the gateway: the public API, through openapi-fetch typed by openapi.d.ts (generated
// from /openapi.json). Every call carries the owner's access token; a 401 (the token lapsed, or the gateway's
// clock says so) signs in again without a click and sends the same request once more, with the same
// Idempotency-Key. The few steps only a human session may take (approving a top-up) go through a second
// client that carries that session instead and never renews it: the person confirms again.
import createClient from 'openapi-fetch';
import type { Auth } from './auth.ts';
import type { components, paths } from './openapi';

export type Schemas = components['schemas'];
export type Api = ReturnType<typeof createClient<paths>>;

/** A refusal of the gateway, as its problem body says it (RFC 9457), or a failure to reach it. */
export class ApiProblem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly body: Record<string, unknown>,
  ) {
    super(detail);
  }
}

/** The human session expired or was refused: the person confirms again. */
export class HumanSessionRequired extends Error {}

/** How long the console waits for an answer before it says the gateway did not answer. */
export const ANSWER_TIMEOUT_MS = 30_000;

/** The gateway took the request but gave no answer in ANSWER_TIMEOUT_MS (it hangs, or a proxy holds the request). */
export class GatewaySilent extends Error {}

/**
 * `fetch`, given up after ANSWER_TIMEOUT_MS: a gateway that hangs left a page loading, or an action busy, with
 * nothing said (found from outside). A timer of the page's (not `AbortSignal.timeout`), so a test's clock drives it.
 */
async function fetchAnswered(request: Request): Promise<Response> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), ANSWER_TIMEOUT_MS);
  try {
    return await fetch(request, { signal: controller.signal });
  } catch (error) {
    if (controller.signal.aborted) throw new GatewaySilent(`The gateway did not answer within ${ANSWER_TIMEOUT_MS / 1000} seconds. Try again; an action sent again is done at most once.`);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

function withBearer(request: Request, token: string): Request {
  const headers = new Headers(request.headers);
  headers.set('authorization', `Bearer ${token}`);
  return new Request(request, { headers });
}

/**
 * Idempotency-Keys of requests whose answer was lost (the network failed after sending: the gateway may have done
 * it), by what the request asked: the same request again (the person clicks "try again" with the form as it was)
 * goes under the same key, so the gateway answers what it did instead of doing it twice. Found from outside: a
 * retried "Create key" made two live keys, one whose secret nobody saw; a retried mandate save refused the owner's
 * own save as a change made elsewhere. An answer ends the entry, unless it says the first request is still running
 * (409 idempotency_key_in_use), the credential must be renewed (401) or the gateway failed (5xx: nothing is kept
 * under the key, so the same key is as good as a new one).
 */
const lostAnswers = new Map<string, string>();

async function fetchOnce(request: Request): Promise<Response> {
  const key = request.headers.get('idempotency-key');
  if (key === null) return fetchAnswered(request);
  const asked = [request.method, request.url, request.headers.get('if-match') ?? '', await request.clone().text()].join('\n');
  const sentKey = lostAnswers.get(asked) ?? key;
  const headers = new Headers(request.headers);
  headers.set('idempotency-key', sentKey);
  let response: Response;
  try {
    response = await fetchAnswered(new Request(request, { headers }));
  } catch (error) {
    lostAnswers.set(asked, sentKey);
    throw error;
  }
  const running = response.status === 409 && ((await response.clone().json().catch(() => ({}))) as { code?: unknown }).code === 'idempotency_key_in_use';
  // A 401 is no answer to the request either: it goes again once signed in (or confirmed) again.
  if (running || response.status === 401 || response.status >= 500) lostAnswers.set(asked, sentKey);
  else lostAnswers.delete(asked);
  return response;
}

export function ownerApi(auth: Auth): Api {
  return createClient<paths>({
    baseUrl: location.origin,
    cache: 'no-store',
    fetch: async (request) => {
      const again = request.clone();
      const first = await fetchOnce(withBearer(request, await auth.accessToken()));
      if (first.status !== 401) return first;
      await auth.renew();
      return fetchOnce(withBearer(again, await auth.accessToken()));
    },
  });
}

/** A client carrying a human session (H); a 401 means the person must confirm again. */
export function humanApi(session: string): Api {
  return createClient<paths>({
    baseUrl: location.origin,
    cache: 'no-store',
    fetch: async (request) => {
      const response = await fetchOnce(withBearer(request, session));
      if (response.status === 401) throw new HumanSessionRequired('Your confirmation has expired: confirm again.');
      return response;
    },
  });
}

/** The answer's body, or its refusal thrown as an ApiProblem. */
export function ok<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.response.ok && result.error === undefined) return result.data as T;
  const body = (typeof result.error === 'object' && result.error !== null ? result.error : {}) as Record<string, unknown>;
  const text = (name: string) => (typeof body[name] === 'string' ? (body[name] as string) : undefined);
  throw new ApiProblem(result.response.status, text('code') ?? text('error') ?? 'error', text('detail') ?? text('error_description') ?? text('title') ?? `the gateway answered ${result.response.status}`, body);
}

/** A fresh Idempotency-Key: one per action the person takes (a retry of it after a lost answer goes under the first one: `fetchOnce`). */
export function newKey(): string {
  return crypto.randomUUID();
}
