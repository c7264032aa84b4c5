import type { Problem } from './types.js';

export interface GatewayErrorOptions {
  /** The Idempotency-Key of a mutating call (capture, release, refund), sent on every attempt. */
  idempotencyKey?: string;
  /** The answer's Retry-After, in seconds. */
  retryAfterS?: number;
  /** How many attempts were made; more than one when retries (429, 5xx, still running) did not get past the refusal. */
  attempts?: number;
}

/**
 * The gateway answered with a problem: a refusal (4xx), or a 429, 5xx or "still running" that the call's retries
 * did not get past. Then the call may or may not have run (a 5xx can come after the work), and a mutating call
 * names its Idempotency-Key: the same call again with that key runs it at most once.
 */
export class GatewayError extends Error {
  readonly status: number;
  /** The gateway's stable machine code, e.g. `hold_resolved`, `refund_window_closed`. */
  readonly code: string | undefined;
  /** The Idempotency-Key of a mutating call (capture, release, refund), to call again with. */
  readonly idempotencyKey: string | undefined;
  /** Seconds the gateway asked to wait before trying again (its Retry-After, as it said it; the client's own waits are at most 30 s), when it said. */
  readonly retryAfterS: number | undefined;
  /** How many attempts were made. */
  readonly attempts: number;

  constructor(
    readonly problem: Problem,
    options: GatewayErrorOptions = {},
  ) {
    const attempts = options.attempts ?? 1;
    super(
      `${problem.status} ${problem.code ?? 'error'}: ${problem.detail ?? problem.title ?? 'the gateway refused the request'}` +
        (attempts > 1 ? ` (after ${attempts} attempts` + (options.idempotencyKey === undefined ? ')' : `; call again with idempotencyKey ${options.idempotencyKey} to run it at most once)`) : ''),
    );
    this.name = 'GatewayError';
    this.status = problem.status;
    this.code = problem.code;
    this.idempotencyKey = options.idempotencyKey;
    this.retryAfterS = options.retryAfterS;
    this.attempts = attempts;
  }
}

/**
 * No answer came from the gateway (connection refused or reset, a timeout) in any of the call's attempts: the call
 * may or may not have run. A mutating call names the Idempotency-Key it sent on every attempt: the same call again
 * with that key (`{ idempotencyKey }`) runs it at most once and answers what the first run did.
 */
export class ConnectionError extends Error {
  readonly code = 'connection_failed';

  constructor(
    /** How many attempts were made, each without an answer. */
    readonly attempts: number,
    /** The Idempotency-Key of a mutating call (capture, release, refund), to retry it with later. */
    readonly idempotencyKey: string | undefined,
    options: { cause: unknown; message?: string },
  ) {
    super(
      options.message ??
        `no answer from the gateway after ${attempts} attempt(s): the call may or may not have run` +
          (idempotencyKey === undefined ? '' : `; retry it with idempotencyKey ${idempotencyKey} to run it at most once`),
      { cause: options.cause },
    );
    this.name = 'ConnectionError';
  }
}

export type VerificationCode =
  /** Bad signature, unknown key, wrong `typ`/`iss`, expired, or malformed claims. */
  | 'invalid_token'
  /** A valid voucher for an offer the caller did not accept. */
  | 'wrong_offer'
  /** A valid voucher whose hold the gateway revoked (it is in the client's RevocationSet): it will not capture. */
  | 'voucher_revoked'
  /** A valid voucher whose amount is outside the caller's bounds. */
  | 'amount_out_of_bounds'
  /** A genuine voucher or receipt issued for another merchant (a voucher's `aud`, a receipt's `merchant_id`). */
  | 'wrong_merchant'
  /** A webhook whose signature, timestamp or body does not verify. */
  | 'invalid_webhook';

/** A voucher, receipt or webhook that must not be trusted. */
export class VerificationError extends Error {
  constructor(
    readonly code: VerificationCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'VerificationError';
  }
}
