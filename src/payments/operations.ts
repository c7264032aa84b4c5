// The payments operations, for every face: request a top-up, and the owner's approve and decline of a top-up
// or of a purchase above a mandate's approval threshold.
import { Type, type Static } from '@sinclair/typebox';
import { ResourceId, VISIBLE_PATTERN } from '../platform/schemas.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import { principalScope } from '../platform/principal.ts';
import type { PurchaseApproval } from './purchases.ts';
import type { OpenedApproval, TopupDraft } from './rails/rail.ts';
import {
  TOPUP_AMOUNT_USD_CENTS_MAX,
  TOPUP_AMOUNT_USD_CENTS_MIN,
  TOPUP_REASON_CHARS_MAX,
  TOPUP_REASON_CHARS_MIN,
  type PaymentsService,
  type Topup,
} from './service.ts';
import type { TopupRow } from './store.ts';

export const RequestTopupInput = Type.Object(
  {
    agentId: ResourceId,
    amountUsdCents: Type.Integer({ minimum: TOPUP_AMOUNT_USD_CENTS_MIN, maximum: TOPUP_AMOUNT_USD_CENTS_MAX, description: 'US cents; 1 cent buys 1 credit (1,000,000 µc)' }),
    reason: Type.String({
      minLength: TOPUP_REASON_CHARS_MIN,
      maxLength: TOPUP_REASON_CHARS_MAX,
      pattern: VISIBLE_PATTERN,
      description: `shown to the owner who approves: ${TOPUP_REASON_CHARS_MIN} to ${TOPUP_REASON_CHARS_MAX} characters, not white space or invisible characters alone`,
    }),
    intentId: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'a pending retained intent of the agent; it runs once the top-up settles' })),
  },
  {
    additionalProperties: false,
    examples: [
      {
        agentId: 'agt_at4q454gyb3q7w6hrpdldhrdgi',
        amountUsdCents: 500,
        reason:
          'Scout needs 5 more dollars of credit to finish reading the repositories you asked it to summarise this week; the retained request runs once you approve.',
        intentId: 'int_giunh6cbig3fv6knrmnopru3d7',
      },
    ],
  },
);
export type RequestTopupInput = Static<typeof RequestTopupInput>;

export const TopupIdInput = Type.Object({ id: ResourceId }, { additionalProperties: false });
export type TopupIdInput = Static<typeof TopupIdInput>;

export const PurchaseIdInput = Type.Object({ id: ResourceId }, { additionalProperties: false });
export type PurchaseIdInput = Static<typeof PurchaseIdInput>;

/**
 * Every top-up operation changes a top-up through the rail, so each first checks that one is configured
 * (503 payment_unavailable); a purchase's approval moves no money and needs none, nor do the reads (queries.ts).
 */
export interface PaymentOperations {
  /** Checked before the key: a rail, then who may top up that agent (its owner's id). */
  requestTopup: SingleStepOperation<RequestTopupInput, Topup, string, { draft: TopupDraft; opened: OpenedApproval }>;
  approveTopup: SingleStepOperation<TopupIdInput, Topup, void>;
  /** Checked before the key: a rail, then the top-up, pending or declined; prepared: the rail refused payment. */
  declineTopup: SingleStepOperation<TopupIdInput, Topup, TopupRow, void>;
  approvePurchase: SingleStepOperation<PurchaseIdInput, PurchaseApproval>;
  declinePurchase: SingleStepOperation<PurchaseIdInput, PurchaseApproval>;
}

export function paymentOperations(payments: PaymentsService): PaymentOperations {
  return {
    requestTopup: {
      name: 'requestTopup',
      input: RequestTopupInput,
      idempotency: { key: 'required' },
      check: async ({ principal, input }) => {
        payments.requireRail();
        return (await payments.authorize(principal, input.agentId)).ownerId;
      },
      prepare: ({ input }) => payments.open(input),
      run: (tx, { principal, input }, ownerId, prepared) => payments.record(tx, { ownerId, requestedBy: principalScope(principal) }, input, prepared),
    },
    approveTopup: {
      name: 'approveTopup',
      input: TopupIdInput,
      idempotency: { key: 'optional' },
      check: () => {
        payments.requireRail();
      },
      run: (tx, { principal, input }) => payments.approve(tx, principal, input.id),
    },
    declineTopup: {
      name: 'declineTopup',
      input: TopupIdInput,
      idempotency: { key: 'optional' },
      check: ({ principal, input }) => {
        payments.requireRail();
        return payments.declinable(principal, input.id);
      },
      prepare: (_call, row) => payments.cancelAtProvider(row),
      run: (tx, { input }) => payments.decline(tx, input.id),
    },
    approvePurchase: {
      name: 'approvePurchase',
      input: PurchaseIdInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => payments.purchases.approve(tx, principal, input.id),
    },
    declinePurchase: {
      name: 'declinePurchase',
      input: PurchaseIdInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => payments.purchases.decline(tx, principal, input.id),
    },
  };
}
