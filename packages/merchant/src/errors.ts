import type { Problem } from './types.js';

/** The gateway answered with a problem (4xx, or a 5xx that retries did not get past). */
export class GatewayError extends Error {
  readonly status: number;
  /** The gateway's stable machine code, e.g. `hold_resolved`, `refund_window_closed`. */
  readonly code: string | undefined;

  constructor(readonly problem: Problem) {
    super(`${problem.status} ${problem.code ?? 'error'}: ${problem.detail ?? problem.title ?? 'the gateway refused the request'}`);
    this.name = 'GatewayError';
    this.status = problem.status;
    this.code = problem.code;
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
    options: { cause: unknown },
  ) {
    super(
      `no answer from the gateway after ${attempts} attempt(s): the call may or may not have run` +
        (idempotencyKey === undefined ? '' : `; retry it with idempotencyKey ${idempotencyKey} to run it at most once`),
      options,
    );
    this.name = 'ConnectionError';
  }
}

export type VerificationCode =
  /** Bad signature, unknown key, wrong `typ`/`iss`/`aud`, expired, or malformed claims. */
  | 'invalid_token'
  /** A valid voucher for an offer the caller did not accept. */
  | 'wrong_offer'
  /** A valid voucher whose hold the gateway revoked (it is in the client's RevocationSet): it will not capture. */
  | 'voucher_revoked'
  /** A valid voucher whose amount is outside the caller's bounds. */
  | 'amount_out_of_bounds'
  /** A valid receipt issued for another merchant. */
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
