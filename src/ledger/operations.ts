// The ledger's operations, for every face: capture, release and refund a hold. Capture and release first
// reclaim the named hold if its deadline passed (so the answer is 409 hold_resolved, and its credit is
// back), before the key is claimed; then one transaction resolves it, shared in group commit with the
// merchant's other captures (or releases) that arrive meanwhile.
import { Type, type Static } from '@sinclair/typebox';
import { idOf, Microcredits } from '../platform/schemas.ts';
import { parseUc, type Microcredits as Uc } from '../platform/money.ts';
import type { BatchPolicy, SingleStepOperation } from '../platform/operations.ts';
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
  // Group commit: one merchant's captures (or releases) share a transaction. Every capture credits the
  // merchant's earnings row, so theirs is the row they would otherwise queue on, one commit each.
  const byMerchant = <I extends { id: string }, C>(): BatchPolicy<I, C> => ({
    orderKey: ({ principal }) => principal.merchantId ?? principal.id,
    lockFirst: (tx, calls) => ledger.lockHolds(tx, calls.map(({ input }) => input.id)),
  });
  return {
    captureRedemption: {
      name: 'captureRedemption',
      input: CaptureRedemptionInput,
      idempotency: { key: 'required' },
      check: async ({ input }) => {
        await ledger.expireDue({ holdId: input.id });
        return input.amountUc === undefined ? undefined : parseUc(input.amountUc);
      },
      run: (tx, { principal, input }, amountUc) => ledger.capture(tx, input.id, { merchantId: principal.merchantId, amountUc }),
      batch: byMerchant(),
    },
    releaseRedemption: {
      name: 'releaseRedemption',
      input: ReleaseRedemptionInput,
      idempotency: { key: 'required', rule: 'release' },
      check: async ({ input }) => {
        await ledger.expireDue({ holdId: input.id });
        return undefined;
      },
      run: (tx, { principal, input }) => ledger.release(tx, input.id, { merchantId: principal.merchantId }),
      batch: byMerchant(),
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
