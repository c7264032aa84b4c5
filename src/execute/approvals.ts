// When an execution needs a human's yes, its request is retained (intents.ts) and its caller is told where the
// human says it. Two cases:
//   - credit does not cover it: with a human approver of top-ups (the payments feature), 402 approval_required
//     carrying the page where the owner approves a top-up; without one, 503 link_configuration_required; with
//     the approver out of reach, 503 payment_unavailable; for a delegate, which has no lots of its own, the
//     approver's 409 delegate_has_no_lots naming the root to credit, its intent closed at once (nothing the approver
//     settles can resume it). After the top-up settles the gateway runs the intent by itself (intents.ts).
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
import { SAME_KEY } from '../platform/idempotency.ts';

const RETRY = `Nothing was charged. Once credit is added, retry with ${SAME_KEY} to run it.`;

/**
 * The approver's refusals that no wait can cure: nothing it will ever settle can resume the intent, so the intent
 * is closed at once with this reason rather than left pending for its lifetime. A delegate owns no lots, so no
 * top-up is bought for it (its root is credited instead). Other refusals (e.g. too many top-ups waiting) may lift.
 */
const FINAL_REFUSAL_REASONS = ['delegate_has_no_lots'] as const;
export type FinalRefusalReason = (typeof FINAL_REFUSAL_REASONS)[number];

function finalReasonOf(refusal: ApiError): FinalRefusalReason | null {
  const reason = refusal.options.extra?.reason;
  return FINAL_REFUSAL_REASONS.find((final) => final === reason) ?? null;
}

/** How an execution short of credit is answered: the refusal, and why its retained intent is closed now (null: it waits). */
export interface ShortCreditAnswer {
  refusal: ApiError;
  closes: FinalRefusalReason | null;
}

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

  /**
   * The answer to an execution whose credit fell short (its intent retained): ask the human, then say where; or,
   * when the approver refuses to ask for a reason no wait cures, that refusal, and the intent to close.
   */
  async refusal(short: ShortCredit): Promise<ShortCreditAnswer> {
    const { intentId, intent, priceUc } = short;
    const extra = { intentId, intent, priceUc: formatUc(priceUc) };
    if (!this.approver) {
      const refusal = new ApiError('link_configuration_required', {
        detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc) and no payment-approval provider is configured. ${RETRY}`,
      });
      return { refusal: uncharged(refusal, extra), closes: null };
    }
    const request: ApprovalRequest = { kind: 'topup', agentId: intent.agentId, ownerId: short.ownerId, amountUc: priceUc, subject: { type: 'intent', id: intentId, intent } };
    let pending: PendingApproval;
    try {
      pending = await this.approver.requestApproval(request);
    } catch (error) {
      // A refusal of the request itself (a delegate has no lots to top up: 409 delegate_has_no_lots, naming its
      // root) is the answer; only the provider's failure is 503.
      if (error instanceof ApiError && error.status < 500) return { refusal: uncharged(error, extra), closes: finalReasonOf(error) };
      this.log.warn({ err: error, intentId }, 'payment-approval provider failed');
      return { refusal: uncharged(new ApiError('payment_unavailable', { detail: `the payment-approval provider could not be reached. ${RETRY}` }), extra), closes: null };
    }
    const refusal = new ApiError('approval_required', {
      detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc); its owner must approve a top-up. ${RETRY}`,
      approval: humanApproval(request, pending),
      extra: { reason: 'topup_required' },
    });
    return {
      refusal: uncharged(refusal, { state: APPROVAL_STATE_PENDING, ...extra, payment: pending.payment, paymentMethods: pending.paymentMethods, instructions: pending.instructions }),
      closes: null,
    };
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
        detail: `${above.refusal.options.detail}. Nothing was charged; once the owner approved, retry with ${SAME_KEY} to run it.`,
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
