// What one execution is, for every part of execute (the pipeline, intents, approvals): its request, its
// answer, and the rule that every answer after the Idempotency-Key is claimed says whether credit moved.
import { ApiError, pathUnder } from '../platform/errors.ts';
import type { Redemption } from '../ledger/service.ts';
import { ConnectorError } from '../connectors/catalogue.ts';
import type { PaymentMethod } from './payer.ts';

/** The execute operation's name: its Idempotency-Keys are scoped to it (resuming an intent claims one again). */
export const EXECUTE_OPERATION = 'executeService';

export const EXECUTE_STATE_SUCCEEDED = 'succeeded';
export const APPROVAL_STATE_PENDING = 'approval_pending';

export interface ExecutionRequest {
  agentId: string;
  serviceId: string;
  action: string;
  input: unknown;
}

export interface ExecuteResult {
  state: typeof EXECUTE_STATE_SUCCEEDED;
  executionId: string;
  result: object;
  /** The captured hold. */
  receipt: Redemption;
  priceUc: string;
  priceUsd: string;
  /** How the execution was paid: the payer's method (the agent's prepaid credit). */
  paymentMethod: PaymentMethod;
}

/**
 * Every answer after the key is claimed says whether credit moved: on this path it never did. A cap or budget of
 * the mandate refuses execute with 403 CAP_EXCEEDED: the spec's error table gives CAP_EXCEEDED 402 for vouchers
 * and 403 elsewhere, and execute's 402 is `approval_required` alone (docs/decisions.md "Refusals name their rule").
 */
export function uncharged(error: unknown, extra: Record<string, unknown> = {}): ApiError {
  if (error instanceof ConnectorError) {
    // A member of the action's input is the request's `input` member's.
    const said = error.member === undefined ? { detail: error.detail } : { member: { path: pathUnder('input', error.member), message: error.detail } };
    return new ApiError(error.code, { ...said, extra: { ...extra, charged: false }, retryAfterS: error.retryAfterS });
  }
  if (error instanceof ApiError) {
    const status = error.code === 'CAP_EXCEEDED' ? 403 : error.options.status;
    return new ApiError(error.code, { ...error.options, status, extra: { ...error.options.extra, ...extra, charged: false } });
  }
  throw error;
}
