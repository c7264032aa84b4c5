/**
 * Why a credit payment could not be made or trusted. The gateway's refusals of `POST /x402/authorize` keep
 * their codes: the draft's (`insufficient_credits`, `bundle_revoked`, `bundle_not_found`,
 * `idempotency_conflict`) and the mandate's (`CAP_EXCEEDED`, `SCOPE_FORBIDDEN`, `approval_required`). The
 * rest are this package's own.
 */
export type CreditErrorCode =
  | 'insufficient_credits'
  | 'bundle_revoked'
  | 'bundle_not_found'
  | 'idempotency_conflict'
  | 'CAP_EXCEEDED'
  | 'SCOPE_FORBIDDEN'
  | 'approval_required'
  /** The requirements name another authority than the gateway the client is configured for (the draft's phishing rule). */
  | 'authority_not_trusted'
  /** The requirements are not this scheme's, or are malformed (a missing `extra` member, an amount that is not an integer). */
  | 'unsupported_requirements'
  /** The amount is above the client's cap for one payment. */
  | 'amount_over_limit'
  /**
   * The gateway could not be reached, or kept failing (429, 5xx, still running), within the attempts: `status`
   * and `problem` are its last answer's, when one came.
   */
  | 'gateway_unavailable'
  /** The gateway's URL answered with a redirect, refused: the credential is never sent on, and a retry would not change it. */
  | 'unexpected_redirect'
  /** A price this scheme cannot express (merchant side). */
  | 'invalid_price'
  /** A route whose `payTo` is not the merchant: only the payee's key settles its payments (merchant side). */
  | 'invalid_pay_to'
  /** A route whose offer the gateway does not sell at its price: none named, not the merchant's, inactive, priced below (merchant side). */
  | 'invalid_offer'
  /** A receipt that does not verify, or was not issued for what it claims. */
  | 'invalid_receipt'
  /**
   * Checked at start-up (merchant side): the `apiKey` is no merchant key (`invalid_api_key`), another merchant's
   * (`unauthorized_server`), or lacks `redemptions:capture` (`scope_required`).
   */
  | 'invalid_api_key'
  | 'unauthorized_server'
  | 'scope_required'
  | (string & {});

/** The gateway's problem body (RFC 9457), with its stable `code` and, on x402 routes, the draft's `error`. */
export interface Problem {
  type?: string;
  title?: string;
  status: number;
  detail?: string;
  code?: string;
  error?: string;
  [member: string]: unknown;
}

export interface CreditErrorOptions {
  status?: number;
  problem?: Problem;
  /** The Idempotency-Key of the authorization that failed. */
  idempotencyKey?: string;
  /** The gateway's Retry-After (seconds) on the answer refused. */
  retryAfterS?: number;
  cause?: unknown;
}

function stringMember(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/**
 * The purchase approval a refusal names: `intentId` of a 402 approval_required (its `purchase.id` too), or
 * `approvalId` of the 409 conflict that closed it (declined, expired, used).
 */
function approvalIdOf(problem: Problem | undefined): string | undefined {
  if (problem === undefined) return undefined;
  const purchase = problem.purchase as { id?: unknown } | null | undefined;
  return stringMember(problem.intentId) ?? stringMember(problem.approvalId) ?? stringMember(purchase?.id);
}

/** A credit payment refused or untrusted, with a stable `code` (see {@link CreditErrorCode}). */
export class CreditError extends Error {
  /** The gateway's HTTP status when the gateway refused; undefined for the package's own refusals. */
  readonly status: number | undefined;
  /** The gateway's whole problem body, when the gateway refused. */
  readonly problem: Problem | undefined;
  /**
   * The Idempotency-Key the authorization was sent with, when it reached for the gateway. `authorize` with this
   * key is the same request again: after `approval_required`, once the owner approved, it takes the hold.
   */
  readonly idempotencyKey: string | undefined;
  /** The page where the owner approves this purchase (the problem's `approvalUrl`), for `approval_required`. */
  readonly approvalUrl: string | undefined;
  /** The purchase approval this refusal names (`GET /v1/payments/purchases/{id}` reads the owner's answer). */
  readonly approvalId: string | undefined;
  /**
   * Seconds the gateway asked to wait before trying again (its Retry-After, as it said it; this package's own waits
   * are at most 30 s), when its last answer carried one: a 429 rate_limited, a 503, a 409 idempotency_key_in_use.
   */
  readonly retryAfterS: number | undefined;

  constructor(
    readonly code: CreditErrorCode,
    message: string,
    options: CreditErrorOptions = {},
  ) {
    // The code leads the message: @x402/fetch rethrows payment failures as plain Errors with our message.
    super(`${code}: ${message}`, { cause: options.cause });
    this.name = 'CreditError';
    this.status = options.status;
    this.problem = options.problem;
    this.idempotencyKey = options.idempotencyKey;
    this.approvalUrl = stringMember(options.problem?.approvalUrl);
    this.approvalId = approvalIdOf(options.problem);
    this.retryAfterS = options.retryAfterS;
  }
}

/** A refusal's words without its code (a CreditError's message is `code: words`). */
export function refusalWords(refusal: CreditError): string {
  return refusal.message.slice(refusal.code.length + 2);
}
