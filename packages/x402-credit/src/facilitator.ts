// The merchant's calls to the gateway as its x402 facilitator (/x402/supported, /verify, /settle), as x402's
// HTTPFacilitatorClient makes them, with the merchant's API key, and retried; and the two reads of the API the
// merchant's checks make with that key (/v1/me at start-up, an offer for the routes' checks, routes.ts). x402's own
// client tries a verify or a settle once: a 429 or a 503 at settle, after the handler ran, turned the agent's paid
// request into a 402, the agent paid again, the handler ran twice, and the first hold stayed held until it expired.
// Both calls are safe to repeat: a verify changes nothing, and the gateway settles a jti exactly once and answers a
// repeat with the first settlement. So each is retried, on no answer, 429, 5xx and "still running", as the agent's
// authorizations are: the gateway's Retry-After honoured (at most 30 s), else backoff, all within a window (30 s)
// that bounds how long the agent waits. When the attempts run out on a settle whose outcome is unknown (no
// answer, 5xx), the capture may have happened: the agent's CreditSchemeClient presents the same payment again, and
// the scheme's single flight answers it with the kept response once a settle goes through (client.ts).
import { HTTPFacilitatorClient } from '@x402/core/server';
import type { PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse } from '@x402/core/types';
import { CreditError, type Problem } from './errors.js';
import { authorityOf } from './requirements.js';
import { ATTEMPTS_DEFAULT, defaultBackoffMs, isRedirect, pause, problemOf, redirectDetail, RETRY_WINDOW_MS_DEFAULT, retryable, retryAfterSOf, waitMsBefore } from './retry.js';

export interface CreditFacilitatorOptions {
  /** The gateway's base URL; the facilitator is at `{gatewayUrl}/x402`. */
  gatewayUrl: string;
  /**
   * A merchant API key with `redemptions:capture` and `redemptions:release`. Checked at start-up (`initialize`, which
   * x402's middlewares run): without capture it throws, since every payment would be refused; without release it warns,
   * since a failed request's hold, or a settlement of "0", would stay held until its expiry. With `offers:read` too,
   * the offer each route names is checked (routes.ts).
   */
  apiKey: string;
  /** Your merchant id: checked at start-up against the key's (another merchant's key would be refused every payment). */
  merchantId?: string;
  /** Timeout of one attempt of a facilitator call (default 10 s). */
  timeoutMs?: number;
  /** Attempts per call, the first included (default 4). */
  attemptsMax?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /**
   * How long one call may take, its retries included (default 30 s): an attempt is cut off at its end, and a retry
   * whose wait would end at or past it is not made. The agent's request waits meanwhile, its handler's answer held back.
   */
  retryWindowMs?: number;
  /** For tests: the wait before retry n (0-based) when the gateway named none. Default: 250 ms · 2ⁿ with jitter, at most 5 s. */
  backoffMs?: (attempt: number) => number;
}

const TIMEOUT_MS_DEFAULT = 10_000;

type Operation = 'supported' | 'verify' | 'settle' | 'key' | 'offer';

/** What each operation answers with 200, as far as x402's resource server reads it. */
const ANSWER_SHAPES: Readonly<Record<Operation, { name: string; accepts: (body: Record<string, unknown>) => boolean }>> = {
  supported: { name: 'SupportedResponse', accepts: (body) => Array.isArray(body.kinds) },
  verify: { name: 'VerifyResponse', accepts: (body) => typeof body.isValid === 'boolean' },
  settle: { name: 'SettleResponse', accepts: (body) => typeof body.success === 'boolean' && typeof body.network === 'string' && typeof body.transaction === 'string' },
  key: { name: 'Me (GET /v1/me)', accepts: () => true },
  offer: { name: 'Offer', accepts: (body) => typeof body.id === 'string' && typeof body.priceUc === 'string' && typeof body.active === 'boolean' },
};

/** One of the merchant's offers as the gateway reads it (GET /v1/merchants/{id}/offers/{offerId}): what the routes' checks need of it. */
export interface CreditOffer {
  id: string;
  /** The most one payment of it may hold, in µc. */
  priceUc: string;
  /** Whether the gateway sells it now. */
  active: boolean;
}

/** The scopes a merchant key of this scheme needs: verify and settle, and a settle of "0" (a release). */
const CAPTURE_SCOPE = 'redemptions:capture';
const RELEASE_SCOPE = 'redemptions:release';

/** JSON with bigints as decimal strings (x402's client sends them so). */
function jsonOf(value: unknown): string {
  return JSON.stringify(value, (_key, member: unknown) => (typeof member === 'bigint' ? member.toString() : member));
}

/**
 * x402's facilitator client for the gateway: the merchant key on every call, verify and settle retried (see the
 * top of this file), and no redirect followed with the key. Refusals throw {@link CreditError}: the gateway's
 * `code` (`unauthorized`, `invalid_input`, …) for a refusal, `gateway_unavailable` when no answer came or the
 * answers kept failing, with the last one's `status`, `problem` and `retryAfterS`. A payment the gateway does not
 * accept is not a refusal: it is a 200 with `isValid` or `success` false and the reason, as x402 has it.
 */
export class CreditFacilitatorClient extends HTTPFacilitatorClient {
  private readonly authorization: string;
  private readonly attemptsMax: number;
  private readonly authority: string;

  constructor(private readonly options: CreditFacilitatorOptions) {
    if (!options.apiKey) throw new TypeError('apiKey is required');
    super({ url: `${authorityOf(options.gatewayUrl)}/x402`, timeoutMs: options.timeoutMs ?? TIMEOUT_MS_DEFAULT });
    this.authority = authorityOf(options.gatewayUrl);
    this.authorization = `Bearer ${options.apiKey}`;
    this.attemptsMax = Math.max(1, options.attemptsMax ?? ATTEMPTS_DEFAULT);
  }

  override async verify(paymentPayload: PaymentPayload, paymentRequirements: PaymentRequirements): Promise<VerifyResponse> {
    return (await this.call('verify', { x402Version: paymentPayload.x402Version, paymentPayload, paymentRequirements })) as unknown as VerifyResponse;
  }

  override async settle(paymentPayload: PaymentPayload, paymentRequirements: PaymentRequirements): Promise<SettleResponse> {
    return (await this.call('settle', { x402Version: paymentPayload.x402Version, paymentPayload, paymentRequirements })) as unknown as SettleResponse;
  }

  /**
   * What the facilitator settles, read at start-up (x402's `initialize`), and the key checked then, so a misconfigured
   * key fails the merchant's start-up rather than every agent's payment (found from outside: a key without the release
   * scope took holds it could not release, each retry locking more of the agent's credit until expiry).
   */
  override async getSupported(): Promise<SupportedResponse> {
    const supported = (await this.call('supported')) as unknown as SupportedResponse;
    const { merchant } = (await this.call('key')) as { merchant?: { merchantId?: unknown; scopes?: unknown } };
    // An owner's session or an agent's token is a credential too, and /v1/me answers it: not a merchant's key (found
    // from outside: read as an unavailable gateway).
    if (typeof merchant !== 'object' || merchant === null) {
      throw new CreditError('invalid_api_key', "apiKey is not a merchant API key (the gateway's /v1/me names no merchant for it): create one for your merchant, with redemptions:capture and redemptions:release");
    }
    const scopes = Array.isArray(merchant.scopes) ? merchant.scopes : [];
    if (this.options.merchantId !== undefined && merchant.merchantId !== this.options.merchantId) {
      throw new CreditError('unauthorized_server', `the API key is merchant ${String(merchant.merchantId)}'s, not ${this.options.merchantId}'s: the gateway would refuse every payment`);
    }
    if (!scopes.includes(CAPTURE_SCOPE)) {
      throw new CreditError('scope_required', `the API key lacks ${CAPTURE_SCOPE}: the gateway would refuse to verify or settle every payment; create a key with ${CAPTURE_SCOPE} and ${RELEASE_SCOPE}`);
    }
    if (!scopes.includes(RELEASE_SCOPE)) {
      process.emitWarning(`x402-credit: the API key lacks ${RELEASE_SCOPE}: the hold of a request that fails, or is settled at "0", cannot be released and stays held (the agent's credit locked) until it expires`);
    }
    return supported;
  }

  /**
   * One of `merchantId`'s offers, as the gateway reads it (the key needs `offers:read`), for the routes' checks
   * (`verifyCreditRoutes` at start-up, the scheme at each request): a route naming an offer the gateway does not sell
   * cannot be paid. Another merchant's offer, or none of that id, is the gateway's 404 `not_found`, thrown as such.
   */
  async offer(merchantId: string, offerId: string): Promise<CreditOffer> {
    const path = `/v1/merchants/${encodeURIComponent(merchantId)}/offers/${encodeURIComponent(offerId)}`;
    const offer = await this.call('offer', undefined, path);
    return { id: offer.id as string, priceUc: offer.priceUc as string, active: offer.active as boolean };
  }

  /** One facilitator call, with its retries; `path` is the gateway's path of a read of the API (`key`, `offer`). */
  private async call(operation: Operation, request?: unknown, path = operation === 'key' ? '/v1/me' : undefined): Promise<Record<string, unknown>> {
    const fetchFn = this.options.fetch ?? fetch;
    const headers: Record<string, string> = { authorization: this.authorization, accept: 'application/json' };
    if (request !== undefined) headers['content-type'] = 'application/json';
    const body = request === undefined ? undefined : jsonOf(request);
    const url = path === undefined ? `${this.url}/${operation}` : `${this.authority}${path}`;
    const what = path === undefined ? `the gateway's /x402/${operation}` : `the gateway's ${path}`;
    const startedMs = Date.now();
    const windowMs = this.options.retryWindowMs ?? RETRY_WINDOW_MS_DEFAULT;
    let lastFailure: CreditError | undefined;
    for (let attempt = 0; attempt < this.attemptsMax; attempt++) {
      if (attempt > 0) {
        const waitMs = waitMsBefore(attempt, lastFailure?.retryAfterS, this.options.backoffMs ?? defaultBackoffMs);
        if (Date.now() + waitMs - startedMs >= windowMs) break;
        await pause(waitMs);
      }
      let response: Response;
      let text: string;
      try {
        response = await fetchFn(url, {
          method: request === undefined ? 'GET' : 'POST',
          headers,
          body,
          // The merchant's key goes to its gateway and nowhere else: a redirect is refused, never followed.
          redirect: 'manual',
          // An attempt ends with the window too, so the whole call takes at most `retryWindowMs`.
          signal: AbortSignal.timeout(Math.max(1, Math.min(this.timeoutMs, windowMs - (Date.now() - startedMs)))),
        });
        text = response.ok ? await response.text() : '';
      } catch (error) {
        // No answer, or one cut short: a settle may have run, and its repeat answers what it did.
        lastFailure = new CreditError('gateway_unavailable', `no answer from ${what}: ${(error as Error).message}`, { cause: error });
        continue;
      }
      if (response.ok) return answerOf(operation, text, what);
      if (isRedirect(response.status)) {
        throw new CreditError('unexpected_redirect', `${what} answered with a redirect, ${redirectDetail(response)}`, { status: response.status });
      }
      const problem = await problemOf(response);
      const retryAfterS = retryAfterSOf(response.headers);
      const detail = describe(response.status, problem);
      if (!retryable(response.status, problem)) {
        throw new CreditError(problem?.code ?? `http_${response.status}`, `${what} refused the call: ${detail}`, { status: response.status, problem, retryAfterS });
      }
      lastFailure = new CreditError('gateway_unavailable', `${what} kept failing after ${attempt + 1} attempt(s); the last answer: ${detail}`, {
        status: response.status,
        problem,
        retryAfterS,
      });
    }
    throw lastFailure!;
  }
}

/** A refusal in a line: its status, code and detail. */
function describe(status: number, problem: Problem | undefined): string {
  return [String(status), problem?.code, problem?.detail ?? problem?.title].filter((part) => part !== undefined && part !== '').join(' ');
}

/** The 200 answer, or a CreditError when it is not what the operation answers (something else answered). */
function answerOf(operation: Operation, text: string, what: string): Record<string, unknown> {
  const shape = ANSWER_SHAPES[operation];
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body) || !shape.accepts(body as Record<string, unknown>)) {
    throw new CreditError('gateway_unavailable', `${what} answered 200 with a body that is not a ${shape.name}: ${text.slice(0, 200)}`);
  }
  return body as Record<string, unknown>;
}

/** x402's facilitator client for the gateway: {@link CreditFacilitatorClient}. */
export function creditFacilitator(options: CreditFacilitatorOptions): CreditFacilitatorClient {
  return new CreditFacilitatorClient(options);
}
