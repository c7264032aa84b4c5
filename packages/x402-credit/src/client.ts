// The agent's side: a SchemeNetworkClient for x402's client (`x402Client`, `@x402/fetch`'s
// wrapFetchWithPayment). For each payment it asks the gateway for an attestation (`POST /x402/authorize`,
// the draft's atomic decrement: a hold on the agent's credit) and hands x402 the payload
// `{ type: 'consume', attestation }`. It pays only the gateway it was configured for: requirements naming
// another `extra.authority` are refused before anything is sent (the draft's allow-list of authorities).
//
// Idempotency as Stripe's clients do it: one key per logical payment, reused for every retry of it. A retry is
// not only the next attempt of one call: a payment above the mandate's approval threshold answers 402
// approval_required and waits for the owner, and the agent's next attempt at the same payment must send the
// same key, or the gateway opens a new approval each time and the approved one is never used. So a key whose
// request the gateway has not settled (approval_required, or no answer at all) is remembered for that
// payment, and forgotten once the gateway answered for good (a hold, a refusal), past its lifetime, or when
// newer ones push it out.
import { randomUUID } from 'node:crypto';
import type { PaymentResponseContext } from '@x402/core/client';
import type { DefaultAsset, Network, PaymentPayloadContext, PaymentPayloadResult, PaymentRequirements, SchemeClientHooks, SchemeNetworkClient } from '@x402/core/types';
import { CONSUME_PAYLOAD_TYPE, CREDIT_ASSET, CREDIT_NETWORK, CREDIT_SCHEME, USD_DECIMALS } from './constants.js';
import { CreditError, type Problem } from './errors.js';
import { amountUcText } from './money.js';
import { authorityOf, creditTerms, isCreditRequirements } from './requirements.js';
import { ATTEMPTS_DEFAULT, defaultBackoffMs, isRedirect, pause, problemOf, redirectDetail, RETRY_WINDOW_MS_DEFAULT, retryable, retryAfterSOf, waitMsBefore } from './retry.js';

/** The agent's credential: an access token, or a function giving a fresh one (called once per payment). */
export type AgentCredential = string | (() => string | Promise<string>);

export interface CreditSchemeClientOptions {
  /** The gateway's base URL, e.g. https://gateway.example.com: the one authority this client pays. */
  gatewayUrl: string;
  /** The agent's access token (Bearer), as for `POST /v1/vouchers`, or a provider of one. */
  credential: AgentCredential;
  /** The most one payment may authorize, in microcredits (default: no cap of the client's own beyond x402's spend controls). */
  maxAmountUc?: bigint | string;
  /** Attempts per authorization, the first included (default 4). Each attempt reuses the payment's idempotency key. */
  attemptsMax?: number;
  /** Timeout of one attempt (default 10 s). */
  timeoutMs?: number;
  /** How long one authorization may take, its retries included (default 30 s): no retry is made whose wait would end past it. */
  retryWindowMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** For tests: the wait before retry n (0-based). Default: 250 ms · 2ⁿ with jitter, at most 5 s. */
  backoffMs?: (attempt: number) => number;
  /** Payments whose keys are remembered at once, waiting for an approval or an answer (default 1,000); past it, the oldest goes. */
  pendingPaymentsMax?: number;
  /**
   * How long a waiting payment's key is remembered (default 30 minutes: the gateway gives the owner 15 minutes
   * to answer, and the approved request as long again to be retried).
   */
  pendingPaymentLifetimeMs?: number;
  /** For tests: the clock. */
  nowMs?: () => number;
}

/** What `POST /x402/authorize` is asked: the requirements' terms (the idempotency key is added per payment). */
export interface AuthorizeRequest {
  /** Microcredits to hold: the requirements' `amount`. */
  amount: string;
  asset: string;
  /** The requirements' `extra.resource`: the attestation is bound to it. */
  resource: string;
  /** The merchant id (`payTo`). */
  payTo: string;
  offerId: string;
  /** The requirements' presentation window; the gateway caps the attestation's. */
  maxTimeoutSeconds?: number;
}

/** What `POST /x402/authorize` answers: the attestation and the hold it stands for. */
export interface Authorization {
  attestation: string;
  redemption: Record<string, unknown> & { id: string };
}

const PENDING_PAYMENTS_MAX_DEFAULT = 1_000;
const PENDING_PAYMENT_LIFETIME_MS_DEFAULT = 30 * 60_000;
const TIMEOUT_MS_DEFAULT = 10_000;
/** The spend-control entry for x402's client: a microcredit is 10⁻⁸ dollar, so x402's default $1 cap is 100 credits. */
const MICROCREDIT_ASSET: DefaultAsset = { asset: CREDIT_ASSET, decimals: USD_DECIMALS, symbol: 'CREDIT' };

/** The gateway's refusal as a CreditError: the draft's code (`error`) first, else the gateway's `code`. */
function refusal(status: number, problem: Problem | undefined, idempotencyKey: string, retryAfterS?: number): CreditError {
  const code = problem?.error ?? problem?.code ?? `http_${status}`;
  return new CreditError(code, problem?.detail ?? problem?.title ?? `the gateway refused the authorization (${status})`, { status, problem, idempotencyKey, retryAfterS });
}

/** The last of the answers that kept failing (429, 5xx, still running) as gateway_unavailable, that answer's status and problem kept. */
function keptFailing(failure: CreditError): CreditError {
  return new CreditError('gateway_unavailable', `the gateway kept failing; the last answer: ${failure.message}`, {
    status: failure.status,
    problem: failure.problem,
    idempotencyKey: failure.idempotencyKey,
    retryAfterS: failure.retryAfterS,
    cause: failure,
  });
}

/**
 * Whether the gateway may still take the hold of this key's request: the owner has not answered yet
 * (approval_required), or no answer said what happened (unreachable, or still failing when the attempts ran
 * out). Any other answer settled the request for good.
 */
function unsettled(error: unknown): boolean {
  if (!(error instanceof CreditError)) return false;
  if (error.code === 'approval_required' || error.code === 'gateway_unavailable') return true;
  return error.status !== undefined && retryable(error.status, error.problem);
}

/**
 * One payment as the gateway tells it from another: every member of the authorize body it fingerprints with
 * the key (a key sent with another body is 409 idempotency_key_reused). The authority and the agent are the
 * client's own. Two calls of one paid route or tool at one price are the same payment, as they are to the owner.
 */
function paymentOf(request: AuthorizeRequest): string {
  return JSON.stringify([request.amount, request.asset, request.resource, request.payTo, request.offerId, request.maxTimeoutSeconds ?? null]);
}

/** What `POST /x402/authorize` is asked for these requirements (throws CreditError for requirements not this scheme's). */
function authorizeRequestOf(requirements: PaymentRequirements, terms = creditTerms(requirements)): AuthorizeRequest {
  return {
    amount: terms.amountUc,
    asset: CREDIT_ASSET,
    resource: terms.resource,
    payTo: terms.merchantId,
    offerId: terms.offerId,
    ...(Number.isInteger(requirements.maxTimeoutSeconds) && requirements.maxTimeoutSeconds > 0 ? { maxTimeoutSeconds: requirements.maxTimeoutSeconds } : {}),
  };
}

/** The keys of payments the gateway has not settled, by payment: bounded in number and in time. */
class PendingPayments {
  private readonly keys = new Map<string, { idempotencyKey: string; expiresAtMs: number }>();

  constructor(
    private readonly entriesMax: number,
    private readonly lifetimeMs: number,
    private readonly nowMs: () => number,
  ) {}

  keyOf(payment: string): string | undefined {
    const entry = this.keys.get(payment);
    if (entry === undefined) return undefined;
    if (entry.expiresAtMs > this.nowMs()) return entry.idempotencyKey;
    this.keys.delete(payment);
    return undefined;
  }

  /** Remembers the key as the newest (a Map iterates in insertion order), the oldest going past the bound. */
  remember(payment: string, idempotencyKey: string): void {
    this.keys.delete(payment);
    this.keys.set(payment, { idempotencyKey, expiresAtMs: this.nowMs() + this.lifetimeMs });
    for (const oldest of this.keys.keys()) {
      if (this.keys.size <= this.entriesMax) break;
      this.keys.delete(oldest);
    }
  }

  /** Forgets the payment's key, unless a concurrent attempt already replaced it with its own. */
  forget(payment: string, idempotencyKey: string): void {
    if (this.keys.get(payment)?.idempotencyKey === idempotencyKey) this.keys.delete(payment);
  }
}

/**
 * The attestations of payments a merchant could not settle or verify for want of the gateway, by payment, oldest
 * first. Each later attempt at the payment presents one, preferring one no other attempt is presenting now (so two
 * requests whose settles both went unanswered are two kept payments, each served once: found from outside, one kept
 * per payment let the second replace the first, whose capture then served nothing), else sharing the oldest (the
 * merchant lets one request at a time take a payment up). An attestation leaves only on the merchant's answer for it,
 * served or refused for good: an attempt that got no answer at all, or one without a payment answer (the handler's
 * own failure, a 429 of a proxy in front), leaves it kept (found from outside: taken out at the attempt's start, it
 * was lost with an attempt whose connection failed, and the next attempt paid again).
 */
class UndecidedPayments {
  private readonly kept = new Map<string, Array<{ attestation: string; untilMs: number; inUseUntilMs: number; passedOver?: boolean }>>();

  constructor(
    private readonly paymentsMax: number,
    private readonly nowMs: () => number,
  ) {}

  /** The attestation the next attempt at the payment presents, if one is kept: marked in use for a while. */
  take(payment: string): string | undefined {
    const nowMs = this.nowMs();
    const list = this.kept.get(payment)?.filter((entry) => entry.untilMs > nowMs);
    if (!list || list.length === 0) {
      this.kept.delete(payment);
      return undefined;
    }
    this.kept.set(payment, list);
    // One the merchant said paid for another request is passed over once: the attempt it refused pays anew.
    const passedOver = list.filter((candidate) => candidate.passedOver);
    for (const candidate of passedOver) candidate.passedOver = false;
    const open = list.filter((candidate) => !passedOver.includes(candidate));
    if (open.length === 0) return undefined;
    const entry = open.find((candidate) => candidate.inUseUntilMs <= nowMs) ?? open[0]!;
    entry.inUseUntilMs = nowMs + IN_USE_MS;
    return entry.attestation;
  }

  /**
   * The merchant refused the attempt presenting it: it paid for another request (the one it was kept for, answered
   * meanwhile or still to come). Kept for that one, and passed over by the next attempt, which pays anew.
   */
  passOver(payment: string, attestation: string): void {
    const entry = this.kept.get(payment)?.find((candidate) => candidate.attestation === attestation);
    if (!entry) return;
    entry.inUseUntilMs = 0;
    entry.passedOver = true;
  }

  /** Keeps the attestation until `untilMs` (once; free for the next attempt); past the bound, the payment kept longest goes. */
  keep(payment: string, attestation: string, untilMs: number): void {
    const list = this.kept.get(payment) ?? [];
    const entry = list.find((candidate) => candidate.attestation === attestation);
    if (entry) entry.inUseUntilMs = 0;
    else list.push({ attestation, untilMs, inUseUntilMs: 0 });
    this.kept.delete(payment);
    this.kept.set(payment, list.slice(-UNDECIDED_PER_PAYMENT_MAX));
    for (const oldest of this.kept.keys()) {
      if (this.kept.size <= this.paymentsMax) break;
      this.kept.delete(oldest);
    }
  }

  /** The attempt presenting it ended without settling anything: free for the next one. */
  release(payment: string, attestation: string): void {
    const entry = this.kept.get(payment)?.find((candidate) => candidate.attestation === attestation);
    if (entry) entry.inUseUntilMs = 0;
  }

  forget(payment: string, attestation: string): void {
    const list = this.kept.get(payment)?.filter((entry) => entry.attestation !== attestation);
    if (list === undefined) return;
    if (list.length === 0) this.kept.delete(payment);
    else this.kept.set(payment, list);
  }
}

/** How long an attempt presenting a kept attestation has it to itself (another attempt then shares it). */
const IN_USE_MS = 60_000;

/** Undecided attestations kept for one payment at most (its requests at once whose settles all went unanswered). */
const UNDECIDED_PER_PAYMENT_MAX = 100;

/**
 * The reasons a merchant's answer gives when it could not learn from the gateway what became of a payment: its
 * facilitator got no answer or kept failing (`gateway_unavailable`, at verify or at settle, when a capture may have
 * happened), or the same payment was still being served (`payment_in_progress`); a paid MCP tool of this package
 * words a settle's as `Settlement failed: <reason>`. The payment is then presented again, never paid a second time.
 */
const UNDECIDED_REASON = /^(Settlement failed: )?(gateway_unavailable|payment_in_progress)\b/;
/** The merchant's refusal of a request presenting a payment that paid for another request (single flight's). */
const PAID_FOR_ANOTHER_REQUEST_REASON = /^paid_for_another_request\b/;
/**
 * How long past its presentation `exp` a kept attestation is presented again: the merchant's single flight keeps a
 * payment it could not settle that long past it (30 s, its clock tolerance), and then settles it without asking the
 * gateway to verify it again; a merchant that no longer knows it refuses it (`attestation_expired`), and it is forgotten.
 */
const REPRESENT_GRACE_MS = 25_000;

/** The `exp` of an attestation (a compact JWS), in ms; undefined when it has none or is not one. */
function presentableUntilMs(attestation: string): number | undefined {
  try {
    const claims = JSON.parse(Buffer.from(attestation.split('.')[1] ?? '', 'base64url').toString()) as { exp?: unknown };
    return typeof claims.exp === 'number' && Number.isFinite(claims.exp) ? claims.exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Agent credit as an x402 client scheme. Register it for {@link CREDIT_NETWORK}:
 * `new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl, credential }))`.
 */
export class CreditSchemeClient implements SchemeNetworkClient {
  readonly scheme = CREDIT_SCHEME;
  /** The gateway this client pays; requirements naming another authority are refused. */
  readonly authority: string;
  private readonly maxAmountUc: bigint | undefined;
  /** The keys of payments the gateway has not settled (waiting for an approval, or for an answer). */
  private readonly pending: PendingPayments;
  /** The attestations of payments a merchant could not settle or verify for want of the gateway: presented again. */
  private readonly undecided: UndecidedPayments;
  /** x402's hooks: the answer to each paid request tells whether its payment is to be presented again. */
  readonly schemeHooks: SchemeClientHooks = { onPaymentResponse: async (context) => this.noteResponse(context) };

  constructor(private readonly options: CreditSchemeClientOptions) {
    this.authority = authorityOf(options.gatewayUrl);
    this.maxAmountUc = options.maxAmountUc === undefined ? undefined : BigInt(amountUcText(options.maxAmountUc, 'maxAmountUc'));
    const entriesMax = Math.max(1, options.pendingPaymentsMax ?? PENDING_PAYMENTS_MAX_DEFAULT);
    this.pending = new PendingPayments(entriesMax, options.pendingPaymentLifetimeMs ?? PENDING_PAYMENT_LIFETIME_MS_DEFAULT, options.nowMs ?? Date.now);
    this.undecided = new UndecidedPayments(entriesMax, options.nowMs ?? Date.now);
  }

  /** x402's spend controls see microcredits as a dollar asset of 8 decimals, so its caps (default $1) apply to credit too. */
  findDefaultAsset(asset: string, network: Network): DefaultAsset | undefined {
    return asset === CREDIT_ASSET && network === CREDIT_NETWORK ? MICROCREDIT_ASSET : undefined;
  }

  async createPaymentPayload(x402Version: number, requirements: PaymentRequirements, context?: PaymentPayloadContext): Promise<PaymentPayloadResult> {
    const terms = creditTerms(requirements);
    let authority: string | undefined;
    try {
      authority = authorityOf(terms.authority);
    } catch {
      authority = undefined;
    }
    if (authority !== this.authority) {
      throw new CreditError('authority_not_trusted', `the requirements name the authority ${JSON.stringify(terms.authority)}; this client pays only ${this.authority}`);
    }
    const amountUc = BigInt(terms.amountUc);
    const caps = [this.maxAmountUc, context?.maxAmountPerPayment === undefined ? undefined : BigInt(context.maxAmountPerPayment)];
    for (const cap of caps) {
      if (cap !== undefined && amountUc > cap) throw new CreditError('amount_over_limit', `${terms.amountUc} µc is above this client's cap of ${cap} µc per payment`);
    }
    const request = authorizeRequestOf(requirements, terms);
    // A payment whose last presentation the merchant could not settle or verify goes again, as it was: the gateway
    // settles it once, and the merchant answers it with what its handler made, instead of a second hold and run.
    const attestation = this.undecided.take(paymentOf(request)) ?? (await this.authorize(request)).attestation;
    return { x402Version, payload: { type: CONSUME_PAYLOAD_TYPE, attestation } };
  }

  /**
   * Reads the merchant's answer to a paid request (x402's `onPaymentResponse`). When it says the merchant could not
   * learn what became of the payment (`gateway_unavailable`, `payment_in_progress`), the attestation is kept until 25 s
   * past its presentation `exp`, so that one later attempt at the same payment presents it again, and x402's
   * transport is told to make that attempt now (`recovered`); the merchant's answer for the payment (served, or
   * refused for good) drops it, and an answer without one (the handler's own failure) leaves it kept.
   */
  private async noteResponse(context: PaymentResponseContext): Promise<void | { recovered: true }> {
    const attestation = (context.paymentPayload.payload as { attestation?: unknown } | undefined)?.attestation;
    if (typeof attestation !== 'string' || !isCreditRequirements(context.requirements)) return;
    let payment: string;
    try {
      payment = paymentOf(authorizeRequestOf(context.requirements));
    } catch {
      return;
    }
    const settled = context.settleResponse;
    const refused = settled === undefined ? context.paymentRequired?.error : undefined;
    const reason = settled === undefined ? refused : settled.success ? undefined : settled.errorReason;
    const untilMs = presentableUntilMs(attestation);
    if (reason !== undefined && UNDECIDED_REASON.test(reason) && untilMs !== undefined && untilMs + REPRESENT_GRACE_MS > (this.options.nowMs ?? Date.now)()) {
      this.undecided.keep(payment, attestation, untilMs + REPRESENT_GRACE_MS);
      // x402's transports retry once on it (@x402/fetch, callPaidTool); an answer undecided again is kept again.
      return { recovered: true };
    }
    if (reason !== undefined && PAID_FOR_ANOTHER_REQUEST_REASON.test(reason)) {
      // Not this request's payment (found from outside: taken for a refusal for good, it was forgotten, and the
      // request it was kept for paid again; or a request sharing it was refused outright): this request pays anew, now.
      this.undecided.passOver(payment, attestation);
      return { recovered: true };
    }
    // The merchant's answer for the payment (served, or refused for good) ends it; an answer without one leaves it kept.
    if (settled !== undefined || refused !== undefined) this.undecided.forget(payment, attestation);
    else this.undecided.release(payment, attestation);
  }

  /**
   * `POST {gateway}/x402/authorize`, its idempotency key reused on every retry (lost answers, 429, 5xx,
   * `idempotency_key_in_use`), so a retry never holds credit twice. Without `idempotencyKey`, the key is the
   * one of the same payment still waiting (for its owner's approval, or for an answer), else a fresh one.
   * Refusals throw {@link CreditError} with the draft's code (`insufficient_credits`, …) or the mandate's
   * (`CAP_EXCEEDED`, `approval_required`, …), and the key they were sent with.
   */
  async authorize(request: AuthorizeRequest, idempotencyKey?: string): Promise<Authorization> {
    if (idempotencyKey !== undefined) return this.authorizeOnce(request, idempotencyKey);
    const payment = paymentOf(request);
    const key = this.pending.keyOf(payment) ?? randomUUID();
    try {
      const authorization = await this.authorizeOnce(request, key);
      this.pending.forget(payment, key);
      return authorization;
    } catch (error) {
      // A failure of the client's own (its credential provider) says nothing of the request: the memory stays.
      if (unsettled(error)) this.pending.remember(payment, key);
      else if (error instanceof CreditError) this.pending.forget(payment, key);
      throw error;
    }
  }

  /** One authorization under one key, its retries included. */
  private async authorizeOnce(request: AuthorizeRequest, idempotencyKey: string): Promise<Authorization> {
    const credential = this.options.credential;
    const token = typeof credential === 'string' ? credential : await credential();
    const fetchFn = this.options.fetch ?? fetch;
    const attemptsMax = Math.max(1, this.options.attemptsMax ?? ATTEMPTS_DEFAULT);
    const body = JSON.stringify({ ...request, idempotencyKey });
    const startedMs = Date.now();
    const windowMs = this.options.retryWindowMs ?? RETRY_WINDOW_MS_DEFAULT;
    let lastFailure: CreditError | undefined;
    for (let attempt = 0; attempt < attemptsMax; attempt++) {
      if (attempt > 0) {
        const waitMs = waitMsBefore(attempt, lastFailure?.retryAfterS, this.options.backoffMs ?? defaultBackoffMs);
        if (Date.now() + waitMs - startedMs >= windowMs) break;
        await pause(waitMs);
      }
      let response: Response;
      try {
        response = await fetchFn(`${this.authority}/x402/authorize`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
          body,
          // The agent's token goes to its gateway and nowhere else: a redirect is refused, never followed.
          redirect: 'manual',
          signal: AbortSignal.timeout(this.options.timeoutMs ?? TIMEOUT_MS_DEFAULT),
        });
      } catch (error) {
        lastFailure = new CreditError('gateway_unavailable', `the gateway could not be reached: ${(error as Error).message}`, { idempotencyKey, cause: error });
        continue;
      }
      if (response.ok) return this.authorization(response, idempotencyKey);
      if (isRedirect(response.status)) {
        throw new CreditError('unexpected_redirect', `the gateway answered the authorization with a redirect, ${redirectDetail(response)}`, { status: response.status, idempotencyKey });
      }
      const problem = await problemOf(response);
      lastFailure = refusal(response.status, problem, idempotencyKey, retryAfterSOf(response.headers));
      if (!retryable(response.status, problem)) throw lastFailure;
    }
    if (lastFailure === undefined) throw new CreditError('gateway_unavailable', 'the gateway could not be reached', { idempotencyKey });
    throw lastFailure.code === 'gateway_unavailable' ? lastFailure : keptFailing(lastFailure);
  }

  private async authorization(response: Response, idempotencyKey: string): Promise<Authorization> {
    let body: unknown;
    try {
      body = await response.json();
    } catch (error) {
      throw new CreditError('gateway_unavailable', 'the gateway answered the authorization with a body that is not JSON', { idempotencyKey, cause: error });
    }
    const attestation = (body as Partial<Authorization> | null)?.attestation;
    if (typeof attestation !== 'string' || attestation.split('.').length !== 3) {
      throw new CreditError('gateway_unavailable', 'the gateway answered the authorization without an attestation', { idempotencyKey });
    }
    return body as Authorization;
  }
}
