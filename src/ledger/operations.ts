// The ledger's operations, for every face: capture, release and refund a hold. Capture and release run in
// group commit (concurrent calls share one transaction, set-based; one hold's calls in arrival order); a
// hold found past its deadline is reclaimed in that transaction (its credit back) and answers 409
// hold_resolved.
import { Type, type Static } from '@sinclair/typebox';
import { idOf, Microcredits } from '../platform/schemas.ts';
import { parseUc, type Microcredits as Uc } from '../platform/money.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import type { LedgerService, Redemption, Refund } from './service.ts';

export const CaptureRedemptionInput = Type.Object(
  {
    id: idOf('redemption: the hold (hold_…)'),
    amountUc: Type.Optional(Microcredits('how much to capture; default the whole hold; the rest returns to the agent')),
  },
  { additionalProperties: false },
);
export type CaptureRedemptionInput = Static<typeof CaptureRedemptionInput>;

export const RefundRedemptionInput = Type.Object(
  {
    id: idOf('redemption: the hold (hold_…)'),
    amountUc: Type.Optional(Microcredits('how much to refund; default everything captured and not yet refunded')),
    reason: Type.Optional(Type.String({ minLength: 1, maxLength: 500, description: 'shown on the refund; not interpreted' })),
  },
  { additionalProperties: false },
);
export type RefundRedemptionInput = Static<typeof RefundRedemptionInput>;

export const ReleaseRedemptionInput = Type.Object({ id: idOf('redemption: the hold (hold_…)') }, { additionalProperties: false });
export type ReleaseRedemptionInput = Static<typeof ReleaseRedemptionInput>;

export interface LedgerOperations {
  captureRedemption: SingleStepOperation<CaptureRedemptionInput, Redemption, Uc | undefined>;
  releaseRedemption: SingleStepOperation<ReleaseRedemptionInput, Redemption>;
  refundRedemption: SingleStepOperation<RefundRedemptionInput, { refund: Refund; redemption: Redemption }, Uc | undefined>;
}

export function ledgerOperations(ledger: LedgerService): LedgerOperations {
  return {
    captureRedemption: {
      name: 'captureRedemption',
      input: CaptureRedemptionInput,
      idempotency: { key: 'required' },
      check: ({ input }) => (input.amountUc === undefined ? undefined : parseUc(input.amountUc)),
      batch: {
        orderKey: ({ input }) => input.id,
        runMany: (tx, calls) =>
          ledger.resolveMany(tx, calls.map(({ call: { principal, input }, checked: amountUc }) => ({ action: 'capture', holdId: input.id, merchantId: principal.merchantId, amountUc }))),
      },
    },
    releaseRedemption: {
      name: 'releaseRedemption',
      input: ReleaseRedemptionInput,
      idempotency: { key: 'required', rule: 'release' },
      batch: {
        orderKey: ({ input }) => input.id,
        runMany: (tx, calls) => ledger.resolveMany(tx, calls.map(({ call: { principal, input } }) => ({ action: 'release', holdId: input.id, merchantId: principal.merchantId }))),
      },
    },
    refundRedemption: {
      name: 'refundRedemption',
      input: RefundRedemptionInput,
      idempotency: { key: 'required' },
      check: ({ input }) => (input.amountUc === undefined ? undefined : parseUc(input.amountUc)),
      run: (tx, { principal, input }, amountUc) => ledger.refund(tx, input.id, { merchantId: principal.merchantId!, amountUc, reason: input.reason }),
    },
  };
}
