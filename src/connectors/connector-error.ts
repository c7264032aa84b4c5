// The failures a service connector reports, each with a stable machine code and the HTTP status the
// execute route answers with. A connector error means the action did not complete, so the pipeline
// releases the hold instead of capturing it.

import { ERROR_CATALOGUE } from '../platform/errors.ts';

/** The codes a connector may report; their statuses and titles live in the one error catalogue. */
export const CONNECTOR_ERROR_CODES = [
  'invalid_input',
  'inbox_not_allowed',
  'connector_not_configured',
  'upstream_not_found',
  // A 4xx: what upstream holds will read no better on a retry, so the answer is final and kept under the key.
  'upstream_unprocessable',
  'upstream_rate_limited',
  'upstream_auth_failed',
  'upstream_unavailable',
  'upstream_timeout',
] as const satisfies ReadonlyArray<keyof typeof ERROR_CATALOGUE>;

export type ConnectorErrorCode = (typeof CONNECTOR_ERROR_CODES)[number];

export class ConnectorError extends Error {
  readonly status: number;

  constructor(
    readonly code: ConnectorErrorCode,
    /** Safe to show the caller: never carries credentials or upstream response bodies. */
    readonly detail: string,
    /** Seconds until a retry may succeed; set with upstream_rate_limited, and with an upstream_unavailable that names a wait. */
    readonly retryAfterS?: number,
    /**
     * The member of the action's input the refusal is about, from the input's root (`cursor`), `detail` saying what is
     * wrong with it (`inputRefusal`): the execute face names it where its request holds the input (`input/cursor`).
     */
    readonly member?: string,
  ) {
    super(detail);
    this.name = 'ConnectorError';
    this.status = ERROR_CATALOGUE[code].status;
  }
}

/**
 * invalid_input refusing one member of the action's input (`path` from the input's root), by a rule its schema cannot
 * state (a cursor of another inbox), as platform/errors.ts's `memberRefusal` does an operation's.
 */
export function inputRefusal(path: string, message: string): ConnectorError {
  return new ConnectorError('invalid_input', message, undefined, path);
}
