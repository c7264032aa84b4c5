// When an execution needs a human's yes, its request is retained (intents.ts) and its caller is told where the
// human says it. Two cases:
//   - credit does not cover it: with a human approver of top-ups (the payments feature), 402 approval_required
//     carrying the page where the owner approves a top-up; without one, 503 link_configuration_required; with
//     the approver out of reach, 503 payment_unavailable; for a delegate, which has no lots of its own, the
//     approver's 409 delegate_has_no_lots naming the root to credit. After the top-up settles the gateway runs the intent
//     by itself (intents.ts).
//   - its price is above the agent's mandate approval threshold: 402 approval_required carrying the page where
//     the owner approves this purchase (the purchase approver, always the payments feature: no rail is needed).
//     The gateway does not run it by itself after approval: the caller's retry with the same Idempotency-Key
//     takes the hold, using the approval in the hold's transaction (pipeline.ts).
// Nothing was charged, and each answer says so.
import {
  humanApproval,
  purchaseApproval,
  type ApprovalRequest,
  type HumanApprover,
  type PendingApproval,
  type PurchaseApprovalRequest,
  type PurchaseApprover,
  type RequestBinding,
  type ServiceIntent,
} from '../platform/approvals.ts';
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

/** The retained intent whose price is above the approval threshold, as its purchase approval is asked for. */
export interface AboveThreshold extends ShortCredit {
  /** The execute request (its Idempotency-Key and fingerprint) the approval belongs to. */
  binding: RequestBinding;
  /** The built-in service's action, as the owner is shown it. */
  offer: { id: string; name: string };
  /** The spending policy's refusal (its detail and `reason`). */
  refusal: ApiError;
}

export class CreditApprovals {
  constructor(
    private readonly log: Gateway['log'],
    /** Absent: insufficient credit answers 503 link_configuration_required. */
    private readonly approver: HumanApprover | undefined,
    /** Asked for a purchase above the approval threshold. */
    private readonly purchases: PurchaseApprover,
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
      // A refusal of the request itself (a delegate has no lots to top up: 409 delegate_has_no_lots, naming its
      // root) is the answer; only the provider's failure is 503.
      if (error instanceof ApiError && error.status < 500) return uncharged(error, extra);
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

  /**
   * The refusal that answers an execution above the approval threshold (its intent retained): the purchase
   * approval of this request (opened, or the one it has), and where the owner answers it.
   */
  async purchaseRefusal(above: AboveThreshold): Promise<ApiError> {
    const { intentId, intent, priceUc } = above;
    const request: PurchaseApprovalRequest = {
      agentId: intent.agentId,
      ownerId: above.ownerId,
      amountUc: priceUc,
      subject: { type: 'intent', id: intentId, intent },
      binding: above.binding,
      merchant: null,
      offer: above.offer,
    };
    const pending = await this.purchases.requestPurchaseApproval(request);
    return uncharged(
      new ApiError('approval_required', {
        detail: `${above.refusal.options.detail}. Nothing was charged; once the owner approved, retry with the same Idempotency-Key to run it.`,
        approval: purchaseApproval(pending),
        extra: above.refusal.options.extra,
      }),
      {
        state: APPROVAL_STATE_PENDING,
        intentId,
        intent,
        priceUc: formatUc(priceUc),
        payment: pending.payment,
        paymentMethods: pending.paymentMethods,
        instructions: pending.instructions,
      },
    );
  }
}
