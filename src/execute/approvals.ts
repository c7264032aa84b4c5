// When credit does not cover an execution, its request is retained (intents.ts) and its caller is told how
// credit can arrive: with a human approver (the payments feature), 402 approval_required carrying the page
// where the owner approves a top-up; without one, 503 link_configuration_required; with the approver out of
// reach, 503 payment_unavailable. Nothing was charged, and each answer says so.
import { humanApproval, type ApprovalRequest, type HumanApprover, type PendingApproval, type ServiceIntent } from '../platform/approvals.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { formatUc, type Microcredits } from '../platform/money.ts';
import { APPROVAL_STATE_PENDING, uncharged } from './execution.ts';

const RETRY = 'Nothing was charged. Once credit is added, retry with the same Idempotency-Key to run it.';

/** The retained intent whose credit fell short, as the approval is asked for. */
export interface ShortCredit {
  intentId: string;
  intent: ServiceIntent;
  /** The agent's owner: the human who approves. */
  ownerId: string;
  priceUc: Microcredits;
}

export class CreditApprovals {
  constructor(
    private readonly log: Gateway['log'],
    /** Absent: insufficient credit answers 503 link_configuration_required. */
    private readonly approver: HumanApprover | undefined,
  ) {}

  get configured(): boolean {
    return this.approver !== undefined;
  }

  /** The refusal that answers an execution whose credit fell short (its intent retained): ask the human, then say where. */
  async refusal(short: ShortCredit): Promise<ApiError> {
    const { intentId, intent, priceUc } = short;
    const extra = { intentId, intent, priceUc: formatUc(priceUc) };
    if (!this.approver) {
      return uncharged(
        new ApiError('link_configuration_required', {
          detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc) and no payment-approval provider is configured. ${RETRY}`,
        }),
        extra,
      );
    }
    const request: ApprovalRequest = { kind: 'topup', agentId: intent.agentId, ownerId: short.ownerId, amountUc: priceUc, subject: { type: 'intent', id: intentId, intent } };
    let pending: PendingApproval;
    try {
      pending = await this.approver.requestApproval(request);
    } catch (error) {
      this.log.warn({ err: error, intentId }, 'payment-approval provider failed');
      return uncharged(new ApiError('payment_unavailable', { detail: `the payment-approval provider could not be reached. ${RETRY}` }), extra);
    }
    return uncharged(
      new ApiError('approval_required', {
        detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc); its owner must approve a top-up. ${RETRY}`,
        approval: humanApproval(request, pending),
      }),
      { state: APPROVAL_STATE_PENDING, ...extra, payment: pending.payment, paymentMethods: pending.paymentMethods, instructions: pending.instructions },
    );
  }
}
