// The ledger's operations, for every face: capture and release a hold. Both first reclaim the named hold
// if its deadline passed (so the answer is 409 hold_resolved, and its credit is back), before the key is
// claimed; then one transaction resolves it.
import { Type, type Static } from '@sinclair/typebox';
import { idOf, Microcredits } from '../platform/schemas.ts';
import { parseUc, type Microcredits as Uc } from '../platform/money.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import type { LedgerService, Redemption } from './service.ts';

export const CaptureRedemptionInput = Type.Object(
  {
    id: idOf('redemption: the hold (hold_…)'),
    amountUc: Type.Optional(Microcredits('how much to capture; default the whole hold; the rest returns to the agent')),
  },
  { additionalProperties: false },
);
export type CaptureRedemptionInput = Static<typeof CaptureRedemptionInput>;

export const ReleaseRedemptionInput = Type.Object({ id: idOf('redemption: the hold (hold_…)') }, { additionalProperties: false });
export type ReleaseRedemptionInput = Static<typeof ReleaseRedemptionInput>;

export interface LedgerOperations {
  captureRedemption: SingleStepOperation<CaptureRedemptionInput, Redemption, Uc | undefined>;
  releaseRedemption: SingleStepOperation<ReleaseRedemptionInput, Redemption>;
}

export function ledgerOperations(ledger: LedgerService): LedgerOperations {
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
    },
  };
}
