// The ledger's operations, for every face: capture, release and refund a hold; grant credit (operator). Capture and release run in
// group commit (concurrent calls share one transaction, set-based; one hold's calls in arrival order); a
// hold found past its deadline is reclaimed in that transaction (its credit back) and answers 409
// hold_resolved.
import { Type, type Static } from '@sinclair/typebox';
import { idOf, Microcredits, ResourceId, UnixSeconds } from '../platform/schemas.ts';
import { parseUc, type Microcredits as Uc } from '../platform/money.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import { GRANT_NOTE_CHARS_MAX, GRANT_PRIORITY_MAX, type LedgerService, type Lot, type Redemption, type Refund } from './service.ts';

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

export const GrantCreditInput = Type.Object(
  {
    agentId: ResourceId,
    amountUc: Microcredits('amount to add, > 0'),
    expiresAt: Type.Optional(UnixSeconds('when the unspent remainder lapses; default never')),
    priority: Type.Optional(Type.Integer({ minimum: 0, maximum: GRANT_PRIORITY_MAX, description: 'burn-down priority, lower is spent first; default 100' })),
    note: Type.Optional(Type.String({ minLength: 1, maxLength: GRANT_NOTE_CHARS_MAX, description: 'why the grant was made (the lot source reference); default "operator grant"' })),
  },
  { additionalProperties: false, examples: [{ agentId: 'agt_at4q454gyb3q7w6hrpdldhrdgi', amountUc: '5000000', note: 'welcome credit' }] },
);
export type GrantCreditInput = Static<typeof GrantCreditInput>;

export interface LedgerOperations {
  captureRedemption: SingleStepOperation<CaptureRedemptionInput, Redemption, Uc | undefined>;
  releaseRedemption: SingleStepOperation<ReleaseRedemptionInput, Redemption>;
  refundRedemption: SingleStepOperation<RefundRedemptionInput, { refund: Refund; redemption: Redemption }, Uc | undefined>;
  /** The operator's grant (POST /v1/operator/credit-grants, `acg credit grant` on a running gateway). */
  grantCredit: SingleStepOperation<GrantCreditInput, { lot: Lot }, Uc>;
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
        readAhead: (tx, calls) => ledger.lockResolving(tx, calls.map(({ call: { input } }) => input.id)),
        runMany: (tx, calls, read) =>
          ledger.resolveMany(
            tx,
            calls.map(({ call: { principal, input }, checked: amountUc, trace }) => ({ action: 'capture', holdId: input.id, merchantId: principal.merchantId, amountUc, trace })),
            read,
          ),
      },
    },
    releaseRedemption: {
      name: 'releaseRedemption',
      input: ReleaseRedemptionInput,
      idempotency: { key: 'required', rule: 'release' },
      batch: {
        orderKey: ({ input }) => input.id,
        readAhead: (tx, calls) => ledger.lockResolving(tx, calls.map(({ call: { input } }) => input.id)),
        runMany: (tx, calls, read) =>
          ledger.resolveMany(tx, calls.map(({ call: { principal, input }, trace }) => ({ action: 'release', holdId: input.id, merchantId: principal.merchantId, trace })), read),
      },
    },
    refundRedemption: {
      name: 'refundRedemption',
      input: RefundRedemptionInput,
      idempotency: { key: 'required' },
      check: ({ input }) => (input.amountUc === undefined ? undefined : parseUc(input.amountUc)),
      run: (tx, { principal, input }, amountUc) => ledger.refund(tx, input.id, { merchantId: principal.merchantId!, amountUc, reason: input.reason }),
    },
    grantCredit: {
      name: 'grantCredit',
      input: GrantCreditInput,
      idempotency: { key: 'required' },
      check: ({ input }) => parseUc(input.amountUc),
      run: async (tx, { input }, amountUc) => ({
        lot: await ledger.grant(tx, {
          agentId: input.agentId,
          amountUc,
          priority: input.priority,
          expiresAtS: input.expiresAt ?? null,
          source: 'grant',
          sourceRef: input.note ?? 'operator grant',
        }),
      }),
    },
  };
}
